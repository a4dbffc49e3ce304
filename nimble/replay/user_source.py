"""Where in the user's own code (outside torch and nimble's replay package) an op was called:
named in the capture's errors, and kept for every recorded op."""

from __future__ import annotations

import os
import sys
import traceback

import torch

_TORCH_DIR = os.path.dirname(torch.__file__) + os.sep
_NIMBLE_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep


def user_source_line() -> str:
    """The innermost frame of the caller's own code (outside torch and nimble)."""
    for frame in reversed(traceback.extract_stack()):
        path = os.path.abspath(frame.filename)
        if path.startswith(_TORCH_DIR) or path.startswith(_NIMBLE_DIR):
            continue
        return f"{frame.filename}:{frame.lineno}: {(frame.line or '').strip()}"
    return "<unknown source line>"


_SOURCE_FILES: dict[str, bool] = {}


def _is_users(filename: str) -> bool:
    user = _SOURCE_FILES.get(filename)
    if user is None:
        path = os.path.abspath(filename)
        user = not (path.startswith(_TORCH_DIR) or path.startswith(_NIMBLE_DIR))
        _SOURCE_FILES[filename] = user
    return user


def user_location() -> str:
    """`user_source_line` without reading the source: cheap enough for every recorded op."""
    frame = sys._getframe(2)
    while frame is not None:
        if _is_users(frame.f_code.co_filename):
            return f"{frame.f_code.co_filename}:{frame.f_lineno}"
        frame = frame.f_back
    return "<unknown source line>"
