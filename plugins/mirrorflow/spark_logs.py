"""Spark's JVM log settings for mirrorflow's jobs: warnings and errors only, none of the start-up notices a healthy
job prints (Airflow shows every stderr line of a task as a red error). Set for the local masters mirrorflow starts
itself; a cluster's own driver options are left alone."""

from pathlib import Path

LOG4J_CONFIG = Path(__file__).resolve().parent / "log4j2.properties"
LOG4J_OPTION = f"-Dlog4j2.configurationFile={LOG4J_CONFIG.as_uri()}"  # a URI: no space for Spark to split on
