"""Where the tool's output goes. In text mode, Kafka's layout: tables and the messages Kafka
prints on stdout go to stdout, notes and warnings to stderr. With `--output json`, stdout carries
exactly one JSON document and every message moves to stderr, so scripts can parse stdout."""

from __future__ import annotations

import json
import sys
from typing import Any


class Output:
    """Sink for one command run; `json_mode` selects `--output json`."""

    def __init__(self, json_mode: bool = False) -> None:
        self.json_mode = json_mode

    def text(self, text: str) -> None:
        """Tables, CSV and other text that only exists in text mode (stdout, written as is)."""
        if not self.json_mode:
            sys.stdout.write(text)

    def message(self, text: str) -> None:
        """A message Kafka prints on stdout (errors, `Warn:` lines); stderr in JSON mode."""
        (sys.stderr if self.json_mode else sys.stdout).write(text)

    def note(self, text: str) -> None:
        """A message Kafka prints on stderr (state notes, WARN lines); stderr in both modes."""
        sys.stderr.write(text)

    def document(self, payload: Any) -> None:
        """The JSON result of the command (JSON mode only)."""
        if self.json_mode:
            sys.stdout.write(json.dumps(payload, indent=2, sort_keys=False) + "\n")
