"""The real systems we measure and test against, fetched by Maven and started on loopback."""
