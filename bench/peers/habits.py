"""Record what Spark's Kafka source does for the Kafka-habit options (issue 26, item 3).

Runs the scenarios of harness/_kafka_habits.py on a fresh Kafka broker through
Spark's ``kafka`` source, writes tests/spark/kafka_habits.json (checked in: ``make
test`` compares the jetstream source against it without Kafka), then runs the same
scenarios on the jetstream source against a fresh nats-server and prints where the
two differ. Exit 1 when they differ. Usage: python bench/peers/habits.py [--no-record]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.peers.kafka import KAFKA_VERSION, KafkaBroker, spark_kafka_jars

from harness import JetStreamSide, KafkaSide, run_all
from oncestream.server import NatsServer

ROOT = Path(__file__).resolve().parents[2]
RECORD = ROOT / "tests" / "spark" / "kafka_habits.json"


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--no-record", action="store_true", help="compare only")
    args = parser.parse_args()
    from oncestream.spark import local_session

    version, jars = spark_kafka_jars()
    spark = local_session("bench-peers-habits", conf={"spark.jars": ",".join(map(str, jars))})
    spark.sparkContext.setLogLevel("ERROR")
    try:
        with KafkaBroker() as broker:
            kafka = run_all(KafkaSide(spark, broker.bootstrap))
        with NatsServer() as server:
            ours = run_all(JetStreamSide(spark, server.url))
    finally:
        spark.stop()
    if not args.no_record:
        record = {
            "kafka": KAFKA_VERSION,
            "spark_sql_kafka": version,
            "recorded": time.strftime("%Y-%m-%d"),
            "results": kafka,
        }
        RECORD.write_text(json.dumps(record, indent=1) + "\n")
        print(f"Kafka's results recorded in {RECORD.relative_to(ROOT)}")
    differ = [name for name in kafka if kafka[name] != ours.get(name)]
    for name in kafka:
        mark = "DIFFERS" if name in differ else "same"
        print(f"  {name}: {mark}")
        if name in differ:
            print(f"    kafka:     {kafka[name]}\n    jetstream: {ours.get(name)}")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
