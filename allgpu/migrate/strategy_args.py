"""A ``tf.distribute`` strategy constructor's arguments, mapped to allgpu's (or refused, saying which)."""

from __future__ import annotations

import libcst as cst

from allgpu.migrate import names
from allgpu.migrate.cst import code


def convert_strategy_call(call: cst.Call, target: str) -> tuple[cst.Call, list[str], str | None, list[int]]:
    """Map ``call``'s arguments (TensorFlow's) to allgpu's ``target`` constructor.

    Positional arguments are named by TensorFlow's order; each is kept, renamed (then passed by keyword) or
    dropped by :data:`allgpu.migrate.names.STRATEGY_ARGS`.

    Returns:
        ``(call, messages, refused, dropped)``: the converted call, notes on what was renamed or dropped, the
        reason it cannot be converted (None when it can) and the indices of the arguments dropped. A keyword allgpu lacks, a ``*args`` or more positional arguments
        than TensorFlow's are refused: migrate does not guess.
    """
    table, order = names.STRATEGY_ARGS[target], names.STRATEGY_POSITIONAL[target]
    messages: list[str] = []
    args: list[cst.Arg] = []
    dropped: list[int] = []
    positional = [a for a in call.args if a.keyword is None and not a.star]
    if len(positional) > len(order):
        return call, [], f"more positional arguments than TensorFlow's {target.split('.')[-1]} takes", []
    shifted = False  # an earlier positional argument was dropped: later ones go by keyword
    for i, arg in enumerate(call.args):
        if arg.star:
            return call, [], f"`{arg.star}{code(arg.value)}` cannot be mapped argument by argument", []
        key = arg.keyword.value if arg.keyword is not None else order[i]
        if key not in table:
            return call, [], f"`{key}=` has no allgpu equivalent", []
        if table[key] is None:
            messages.append(f"`{key}` dropped ({names.DROPPED_WHY[key]})")
            shifted = shifted or arg.keyword is None
            dropped.append(i)
            continue
        if table[key] != key or (arg.keyword is None and shifted):
            if table[key] != key:
                messages.append(f"`{key}=` -> `{table[key]}=`")
            arg = arg.with_changes(keyword=cst.Name(table[key]), equal=cst.AssignEqual(
                whitespace_before=cst.SimpleWhitespace(""), whitespace_after=cst.SimpleWhitespace("")))
        args.append(arg)
    if target == "allgpu.ParameterServerStrategy":
        messages.append(names.PS_NOTE)
    if args:
        args[-1] = args[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
    return call.with_changes(args=args), messages, None, dropped
