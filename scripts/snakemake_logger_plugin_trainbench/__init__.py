"""Snakemake logger plugin ``trainbench`` (``--logger trainbench``; the default
profile selects it): the terminal shows one line per finished job and a closing
summary (trainbench.analysis.console); errors and warnings in full, as Snakemake formats
them; everything with ``--verbose`` or in a dry run. Snakemake's log file under
``.snakemake/log/`` keeps every job block either way.

Why a logger plugin and not ``--quiet`` plus our own prints: ``--quiet`` still
prints the scheduler's "Select jobs to execute..." for every job and hides errors
only all or nothing; a plugin replaces exactly the terminal stream."""

from __future__ import annotations

import logging
import sys

from snakemake_interface_logger_plugins.base import LogHandlerBase
from trainbench.analysis.console import Console


class LogHandler(LogHandlerBase):
    def __post_init__(self) -> None:
        from snakemake.logging import DefaultFilter, DefaultFormatter

        settings = self.common_settings
        self.passthrough = bool(settings.verbose or settings.dryrun or settings.debug_dag)
        self.formatter_ = DefaultFormatter(settings.quiet, settings.show_failed_logs)
        self.filter_ = DefaultFilter(
            settings.quiet,
            settings.debug_dag,
            settings.verbose,
            settings.dryrun,
            settings.printshellcmds,
        )
        self.console = Console()
        self.stream = sys.stdout if settings.stdout else sys.stderr

    def _write(self, text: str) -> None:
        if text:
            self.stream.write(text.rstrip("\n") + "\n")
            self.stream.flush()

    def emit(self, record: logging.LogRecord) -> None:
        try:
            event = getattr(record, "event", None)
            event = str(event) if event is not None else None
            if (
                self.passthrough
                or record.levelno >= logging.WARNING
                or event
                in (
                    "job_error",
                    "group_error",
                    "error",
                )
            ):
                if self.filter_.filter(record):
                    self._write(self._error_text(record))
                return
            message = record.getMessage() if record.msg is not None else ""
            for line in self.console.handle(event, record.__dict__, message, record.levelno):
                self._write(line)
        except Exception:  # a console glitch must never stop a run
            self.handleError(record)

    def _error_text(self, record: logging.LogRecord) -> str:
        """Snakemake's formatted record; a config refusal as the config check prints
        it (trainbench.config.files.refusal_lines)."""
        text = self.formatter_.format(record)
        if record.levelno < logging.ERROR:
            return text
        try:
            from trainbench.config.files import refusal_lines

            lines = refusal_lines(text, sys.argv[1:])
        except Exception:  # never hide Snakemake's own message
            lines = None
        return "\n".join(lines) if lines else text

    @property
    def writes_to_stream(self) -> bool:
        return True

    @property
    def writes_to_file(self) -> bool:
        return False

    @property
    def has_filter(self) -> bool:
        return True

    @property
    def has_formatter(self) -> bool:
        return True

    @property
    def needs_rulegraph(self) -> bool:
        return False
