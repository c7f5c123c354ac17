"""The Spark jobs' tests share the one SparkSession of the run."""

from tests.connector.conftest import spark  # noqa: F401
