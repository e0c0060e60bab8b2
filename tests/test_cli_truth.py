"""The CLI as a stranger meets it: what README.md and docs/cli.md promise about odd inputs and outputs."""

import json
import sys

import pytest

from allgpu.cli.main import main


def _lint(capsys, *argv):
    code = main(["lint", *map(str, argv)])
    return code, capsys.readouterr().out


def test_sarif_uri_of_a_path_with_a_space_is_percent_encoded(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "my script.py").write_text("import torch.nn as nn\nmodel = nn.DataParallel(model)\n")
    code, out = _lint(capsys, "my script.py", "--format", "sarif")
    loc = json.loads(out)["runs"][0]["results"][0]["locations"][0]["physicalLocation"]["artifactLocation"]
    assert code == 1 and loc["uri"] == "my%20script.py"


def test_unreadable_bytes_name_the_fix_and_do_not_contradict_themselves(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "latin.py").write_bytes(b"\xff\xfe x = 1\n")
    (tmp_path / "broken.py").write_text("def f(:\n")
    code, out = _lint(capsys, "latin.py", "broken.py", "--format", "json")
    msgs = {f["path"]: f["message"] for f in json.loads(out)["findings"]}
    assert code == 1
    assert "Fix: save the file as UTF-8" in msgs["latin.py"]
    assert "nothing in the file was checked" in msgs["broken.py"]
    assert "the parts that parse were checked" not in msgs["broken.py"]


TF_SCRIPT = "import tensorflow as tf\nstrategy = tf.distribute.MirroredStrategy()\n"


def _migrate(capsys, *argv):
    code = main(["migrate", "--no-diff", *map(str, argv)])
    return code, capsys.readouterr().err


def test_migrate_write_through_a_symlink_keeps_the_link(tmp_path, capsys):
    (tmp_path / "real.py").write_text(TF_SCRIPT)
    (tmp_path / "link.py").symlink_to("real.py")
    code, _ = _migrate(capsys, "--write", tmp_path / "link.py")
    assert code == 0 and (tmp_path / "link.py").is_symlink()
    assert "allgpu.MirroredStrategy()" in (tmp_path / "real.py").read_text()


def test_migrate_write_refuses_a_read_only_file(tmp_path, capsys):
    script = tmp_path / "ro.py"
    script.write_text(TF_SCRIPT)
    script.chmod(0o444)
    code, err = _migrate(capsys, "--write", script)
    assert code == 2 and "read-only" in err and "chmod u+w" in err and "Traceback" not in err
    assert script.read_text() == TF_SCRIPT


def test_migrate_write_refuses_a_file_changed_while_migrating(tmp_path, capsys, monkeypatch):
    import allgpu.migrate.files as files

    script = tmp_path / "train.py"
    script.write_text(TF_SCRIPT)
    real = files.migrate_source

    def edited_meanwhile(source, name):
        script.write_text(TF_SCRIPT + "print('edited')\n")
        return real(source, name)

    monkeypatch.setattr(files, "migrate_source", edited_meanwhile)
    code, err = _migrate(capsys, "--write", script)
    assert code == 2 and "changed on disk" in err
    assert script.read_text().endswith("print('edited')\n")


def test_migrate_reads_and_writes_a_declared_latin1_script(tmp_path, capsys):
    script = tmp_path / "lat.py"
    script.write_bytes(b"# -*- coding: latin-1 -*-\n" + TF_SCRIPT.encode() + b"s = '\xe9'\n")
    code, _ = _migrate(capsys, "--write", script)
    assert code == 0 and script.read_bytes().endswith(b"s = '\xe9'\n")
    assert b"allgpu.MirroredStrategy()" in script.read_bytes()
    (tmp_path / "raw.py").write_bytes(b"\xff\xfe x = 1\n")
    code, err = _migrate(capsys, tmp_path / "raw.py")
    assert code == 2 and "Fix: save it as UTF-8" in err


def test_ctrl_c_in_any_command_is_a_clean_message_and_130(capsys, monkeypatch):
    import allgpu.cli.bench as bench

    def interrupted(args):
        raise KeyboardInterrupt

    monkeypatch.setattr(bench, "run", interrupted)
    code = main(["bench", "--memory"])
    err = capsys.readouterr().err
    assert code == 130 and "allgpu bench: interrupted (Ctrl-C)" in err and "Traceback" not in err


def test_bench_output_paths_are_checked_before_measuring(tmp_path, capsys, monkeypatch):
    import pytest

    import allgpu.bench

    monkeypatch.setattr(allgpu.bench, "compare", lambda *a, **k: pytest.fail("measured with a bad --json path"))
    for argv in (["--json", str(tmp_path / "missing" / "b.json")], ["--json", str(tmp_path)],
                 ["--predict", "--plot", str(tmp_path / "missing" / "p.png")]):
        with pytest.raises(SystemExit) as exit_:
            main(["bench", *argv])
        assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "does not exist; create it" in err and "is a folder" in err


@pytest.mark.replicas  # runs a child script
def test_doctor_run_ctrl_c_stops_the_script_and_still_gives_the_verdict(tmp_path):
    import io
    import signal
    import threading
    import time

    from allgpu.doctor.run_any import run_child

    script = tmp_path / "slow.py"
    script.write_text("import time\nprint('step', flush=True)\ntime.sleep(60)\n")
    main_thread = threading.main_thread().ident
    started = time.monotonic()
    timer = threading.Timer(3.0, lambda: signal.pthread_kill(main_thread, signal.SIGINT))
    # Python's own Ctrl-C handler, as in the CLI's fresh process: an earlier test in this worker may have left
    # another library's handler installed (Ray Train's trainer installs one that aborts its run).
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        timer.start()
        code, lines, stopped = run_child([sys.executable, str(script)], io.StringIO(), None, [])
    finally:
        timer.cancel()
        signal.signal(signal.SIGINT, previous)
    assert stopped == "interrupt" and code in (130, 143) and lines == ["step\n"]
    assert time.monotonic() - started < 30


def test_doctor_options_after_run_or_without_it_are_usage_errors(capsys):
    assert main(["doctor", "--run", "--report", "out", "train.py"]) == 2
    assert "put doctor's options before --run" in capsys.readouterr().err
    assert main(["doctor", "--steps", "3"]) == 2  # was silently ignored: a full machine check ran instead
    assert "used only with --run" in capsys.readouterr().err


def test_doctor_explain_lists_each_known_id_once(capsys):
    assert main(["doctor", "--explain", "no-such-id"]) == 2
    listed = capsys.readouterr().err.split("known ids: ")[1].split(". Fix")[0].split(", ")
    assert len(listed) == len(set(listed)) and "input-bound" in listed


def test_demo_below_the_bar_after_few_epochs_blames_the_epochs_not_the_machine(tmp_path, capsys, monkeypatch):
    import allgpu.bench.demo as demo

    def low(**kw):
        return demo.DemoResult(2, "cpu", kw["epochs"], 64, 0.9, 0.3, 1.0, 0.5, 1.0, None, None, [])

    monkeypatch.setattr(demo, "run_demo", low)
    report = tmp_path / "new folder" / "deeper" / "out.json"
    assert main(["demo", "--epochs", "2", "--report", str(report)]) == 1
    err = capsys.readouterr().err
    assert "after 2 epoch(s)" in err and "machine" not in err
    assert json.loads(report.read_text())["test_accuracy"] == 0.9
    assert main(["demo"]) == 1 and "something is wrong with this machine" in capsys.readouterr().err
    (tmp_path / "afile").write_text("")
    assert main(["demo", "--report", str(tmp_path / "afile" / "x.json")]) == 2  # before training, not after
    assert "is a file, not a folder" in capsys.readouterr().err


def test_run_names_a_folder_given_as_the_script(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "src").mkdir()
    assert main(["run", "--cpu-replicas", "2", "src"]) == 2
    err = capsys.readouterr().err
    assert "'src' is a folder, not a script" in err and "Fix: give the path" in err


def test_ctrl_c_while_replica_0_waits_for_the_others_at_exit_is_no_traceback(tmp_path, capsys, monkeypatch):
    """`allgpu demo` / `python train.py`: Ctrl-C after replica 0's script ended, while it waits for the others,
    printed 'Exception ignored in atexit callback ... KeyboardInterrupt' and exited 0."""
    import threading

    from allgpu.runtime import replicas as mod

    class Waiting:
        pid, returncode = 999999, None

        def wait(self, timeout=None):
            if self.returncode is None:
                self.returncode = -15
                raise KeyboardInterrupt
            return self.returncode

        def poll(self):
            return self.returncode

        def terminate(self):
            self.returncode = -15

        kill = terminate

    job = mod.ScriptReplicas.__new__(mod.ScriptReplicas)
    job.__dict__.update(placement={"rank_offset": 0}, timeout_s=5, _procs={1: Waiting()}, error_dir=str(tmp_path),
                        _stopping=False, _interrupted_main=False, _main_failed=False, _stopped=threading.Event(),
                        _store=None)
    monkeypatch.setattr(mod.os, "kill", lambda *a: None)
    monkeypatch.setattr(mod, "_STOPPED", [])
    monkeypatch.setattr(mod.os, "_exit", lambda code: (_ for _ in ()).throw(SystemExit(code)))
    with pytest.raises(SystemExit) as ended:
        job._at_exit()
    assert ended.value.code == 130 and "interrupted (Ctrl-C) while waiting for replica 1" in capsys.readouterr().err


def test_a_reader_that_leaves_the_pipe_is_no_traceback(monkeypatch, capsys):
    """`allgpu lint --list-rules | head -1` printed a BrokenPipeError traceback."""
    import io

    class LeftPipe(io.StringIO):
        def write(self, text):
            raise BrokenPipeError(32, "Broken pipe")

    monkeypatch.setattr(sys, "stdout", LeftPipe())
    assert main(["lint", "--list-rules"]) == 141
    assert "Traceback" not in capsys.readouterr().err


def test_a_folder_with_no_script_is_said_not_passed_in_silence(tmp_path, capsys):
    (tmp_path / "notes").mkdir()
    assert main(["lint", str(tmp_path / "notes")]) == 0
    assert "no .py or .ipynb file under" in capsys.readouterr().err
    assert main(["migrate", str(tmp_path / "notes")]) == 0
    assert "nothing to migrate" in capsys.readouterr().err


def test_doctor_log_of_an_empty_capture_says_so(tmp_path, capsys):
    (tmp_path / "run.log").write_text("\n")
    assert main(["doctor", "--log", str(tmp_path / "run.log")]) == 2
    assert "the log is empty" in capsys.readouterr().err


def test_migrate_on_a_folder_goes_on_past_a_file_that_does_not_parse(tmp_path, capsys):
    from allgpu.cli.main import main

    (tmp_path / "a_broken.py").write_text("def f(:\n")
    (tmp_path / "b_train.py").write_text("import tensorflow as tf\nstrategy = tf.distribute.MirroredStrategy()\n")
    code = main(["migrate", "--write", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 1, err  # something ran: not a usage error
    assert "a_broken.py" in err and "the other files go on" in err and "1 of 2 file(s) could not be migrated" in err
    assert "allgpu.MirroredStrategy()" in (tmp_path / "b_train.py").read_text()
    assert (tmp_path / "a_broken.py").read_text() == "def f(:\n"
    assert main(["migrate", str(tmp_path / "a_broken.py")]) == 2  # the one file: a usage error, as before
