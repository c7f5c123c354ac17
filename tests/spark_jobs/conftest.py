"""The Spark jobs' tests share the one SparkSession of the run, and each module gets a broker
and a client of its own, as the connector's tests do."""

from tests.connector.conftest import broker, client, spark  # noqa: F401
