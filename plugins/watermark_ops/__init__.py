"""watermark-ops: Airflow operations for Spark Structured Streaming event-time jobs.

The pure core (checkpoint reading, audit rules, stall classification, the lander) imports
neither Airflow nor Spark; the Airflow faces (operators, sensors, triggers, notifiers, plugin)
are thin layers over it. Importing this package imports nothing heavy.
"""

__version__ = "0.1.0"
