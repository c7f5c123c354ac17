"""The gRPC front end: RocketMQ's public v2 protocol over the broker (no policy here)."""
