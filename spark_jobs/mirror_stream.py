"""spark-submit entry point of the mirror stream.

    spark-submit --jars <Spark's Kafka connector jars> spark_jobs/mirror_stream.py [--config FILE] --flow A->B

Takes the arguments of `mirrorflow stream`, plus the global --config; master and jars come from spark-submit.
"""

import sys

from mirrorflow.entry.spark_jobs import submit_main

if __name__ == "__main__":
    sys.exit(submit_main("stream", sys.argv[1:]))
