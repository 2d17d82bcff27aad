"""The operator tests share helpers in ``_helpers.py`` (one-node ONNX models run by onnxruntime or onnx.reference,
random inputs, comparisons with PyTorch autograd). pytest runs with ``--import-mode=importlib``, which does not put
this directory on sys.path, so do it here, before the test modules are collected."""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)
