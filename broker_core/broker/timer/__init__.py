"""Timed delivery: RocketMQ's 18 delay levels (``schedule``) and the persistent timing wheel for
any delivery time (``timer`` over ``wheel``, ``log`` and ``policy``)."""
