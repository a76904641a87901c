"""The terminal face: the ``watermark-ops`` command for the on-call engineer.

:mod:`~watermark_ops.terminal.cli` (arguments → core → :mod:`watermark_ops.render`),
:mod:`~watermark_ops.terminal.state_cli` (the ``state`` and ``preflight`` subcommands),
:mod:`~watermark_ops.terminal.progress` (rich's progress bar during long reads, on a terminal only).
Needs rich (``pip install "watermark-ops[cli]"``, or the ``airflow`` extra).
"""
