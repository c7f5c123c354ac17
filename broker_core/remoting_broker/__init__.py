"""The broker's RocketMQ 4.x remoting front end (see ``frontend.py``)."""
