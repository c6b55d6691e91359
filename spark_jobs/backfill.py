"""spark-submit entry point of the backfill.

    spark-submit --jars <Spark's Kafka connector jars> spark_jobs/backfill.py [--config FILE] --flow A->B \
        (--from-offsets JSON | --from-time T) [--to-time T] [--topics RE] [--pause]

Takes the arguments of `mirrorflow backfill`.
"""

import sys

from mirrorflow.entry.spark_jobs import submit_main

if __name__ == "__main__":
    sys.exit(submit_main("backfill", sys.argv[1:]))
