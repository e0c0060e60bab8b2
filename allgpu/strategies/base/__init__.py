"""The public strategy API every strategy shares (``strategy.py``) and TensorFlow's other names for it (``tf_names.py``)."""
