"""A syrupy extension storing a run as its transcript, one readable text file per snapshot."""

from __future__ import annotations

__all__ = ["TranscriptExtension"]

from typing import Any

from turnstile.core import LoopState
from turnstile.executors import Run, transcript

try:
    from syrupy.extensions.single_file import SingleFileSnapshotExtension, WriteMode
except ModuleNotFoundError as error:
    from turnstile.providers.extras import missing_extra

    raise missing_extra(error, "pytest", needed_by="TranscriptExtension") from None


class TranscriptExtension(SingleFileSnapshotExtension):
    """`assert run == snapshot(extension_class=TranscriptExtension)`: a `.txt` per test whose
    diff in review reads like the conversation."""

    _write_mode = WriteMode.TEXT
    file_extension = "txt"

    def serialize(self, data: Any, **kwargs: Any) -> str:
        if isinstance(data, Run):
            return data.transcript() + "\n"
        if isinstance(data, LoopState):
            return transcript(data) + "\n"
        raise TypeError(f"TranscriptExtension stores runs and loop states, not {type(data)}")
