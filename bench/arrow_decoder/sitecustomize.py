"""Turn the Arrow decoder on in every txjoin process started with this directory on PYTHONPATH.

bench.size runs ``txjoin run`` as a child process, whose spec has no setting for the decoder
(``ChangelogInput.arrow_decoder`` is off by default, bench/NOTES.md). For comparing the two::

    PYTHONPATH=bench/arrow_decoder .venv/bin/python -m bench.size --sizes 10000000 --runs 1

Python imports ``sitecustomize`` at start-up; Spark's Python workers inherit the variable and
import it too, where it only wraps a function they do not call.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import txjoin.decode as _decode

_changelog_input = _decode.changelog_input


def _with_arrow_decoder(*args: Any, **kwargs: Any) -> Any:
    inp = _changelog_input(*args, **kwargs)
    return dataclasses.replace(inp, arrow_decoder=True) if inp.kind == "files" else inp


_decode.changelog_input = _with_arrow_decoder
