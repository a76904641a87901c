"""Examples that run watermark-ops end to end; ``flights`` is the one ``make run`` uses."""
