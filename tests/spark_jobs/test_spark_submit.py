"""``spark-submit --master local[2] spark_jobs/order_events.py`` as a user runs it (issue 30,
defect 9): the job gets 4 shuffle partitions (not Spark's 200; the stateful query records
the number in its checkpoint), prints no INFO lines, and reports the input rows it could
not use — the README's own sample ``{"id": 1}`` among them.

One spark-submit JVM for the module, against a broker process of the module.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from broker_core.client import OutgoingMessage, RocketMQClient
from tests.connector.conftest import BrokerProcess, new_topic
from tests.spark_jobs.test_jobs import event

ROOT = Path(__file__).resolve().parents[2]
SUBMIT = Path(sys.executable).with_name("spark-submit")


def test_spark_submit_local_run(client: RocketMQClient, broker: BrokerProcess, tmp_path) -> None:
    source, sink = new_topic(client, "orders"), new_topic(client, "stats")
    bodies = [event(0, "PAID", 100, "2026-11-22T10:00:05Z"), b'{"id": 1}', b'{"id": 2}']
    client.send_batch(source, [OutgoingMessage(b) for b in bodies])
    checkpoint = tmp_path / "ckpt"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYSPARK_", "SPARK_CONF"))}
    env |= {
        "PYSPARK_PYTHON": sys.executable,  # as the README's spark-submit lines say
        "SPARK_LOCAL_IP": "127.0.0.1",
    }
    done = subprocess.run(
        [
            str(SUBMIT),
            "--master",
            "local[2]",
            "--driver-memory",
            "512m",
            str(ROOT / "spark_jobs" / "order_events.py"),
            "--endpoints",
            broker.endpoint,
            "--input-topic",
            source,
            "--output-topic",
            sink,
            "--checkpoint",
            str(checkpoint),
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-4000:]
    assert "3 input messages" in done.stdout and "2 could not be used" in done.stdout, output
    info = [line for line in output.splitlines() if " INFO " in line]
    assert info == [], info[:20]
    offsets = (checkpoint / "offsets" / "0").read_text().splitlines()
    conf = json.loads(offsets[1])["conf"]
    assert conf["spark.sql.shuffle.partitions"] == "4", conf
