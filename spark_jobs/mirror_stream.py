"""spark-submit entry point of the mirror stream.

    spark-submit --jars <Spark's Kafka connector jars> spark_jobs/mirror_stream.py [--config FILE] --flow A->B

Takes the arguments of `mirrorflow stream`, plus the global --config; master and jars come from spark-submit.
"""

import sys

from mirrorflow.cli import main


def _argv(args: list[str]) -> list[str]:
    front: list[str] = []
    while "--config" in args:
        at = args.index("--config")
        front += args[at:at + 2]
        args = args[:at] + args[at + 2:]
    return [*front, "stream", *args]


if __name__ == "__main__":
    sys.exit(main(_argv(sys.argv[1:])))
