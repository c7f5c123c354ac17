"""Placeholder: the ``rmq`` command (replaced by its implementation)."""


def main() -> None:
    raise SystemExit("rmq is not implemented yet")
