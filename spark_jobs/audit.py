"""spark-submit entry point of the completeness audit.

    spark-submit --jars <Spark's Kafka connector jars> spark_jobs/audit.py [--config FILE] --flow A->B \
        [--topics RE] [--from-time T --to-time T] [--json]

Takes the arguments of `mirrorflow audit`; exits 1 when anything is missing or differs.
"""

import sys

from mirrorflow.entry.spark_jobs import submit_main

if __name__ == "__main__":
    sys.exit(submit_main("audit", sys.argv[1:]))
