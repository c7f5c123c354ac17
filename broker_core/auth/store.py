"""Users and their ACL rules, kept in ``STORE_DIR/config/auth.json``.

The file is written atomically on every change, with a checksum and a ``.bak``
(``store.atomic_file``), like the topic and group tables, and readable by the broker's
user only (mode 0600: it holds secret keys, which HMAC verification needs in clear).
Users given in the broker's TOML (``[[auth.users]]``) are written into the table at
every start and cannot be deleted through the API (remove them from the file).

A rule for a resource replaces the user's earlier rule for the same resource and
decision; ``delete_acl`` removes a user's rules for one resource (or all of them).
Thread-safe; reads are served from memory. A slave copies its master's file with the
other config tables and calls :meth:`AuthStore.reload` (``ha/metadata.py``), so a slave
promoted to master enforces the same users and rules.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from broker_core.auth.acl import (
    Rule,
    User,
    check_pattern,
    validate_access_key,
    validate_secret_key,
)
from broker_core.errors import InvalidArgumentError, NotFoundError
from broker_core.store.atomic_file import read_json_table, write_json_atomic

AUTH_FILE = "auth.json"  # in the store's config directory


class AuthStore:
    """The durable user and ACL table (see the module docstring)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._users: dict[str, User] = {}
        self._rules: dict[str, list[Rule]] = {}
        self._configured: dict[str, User] = {}
        self._users, self._rules = _load(path)

    def reload(self) -> None:
        """Re-read the file, which a slave has just replaced with its master's copy
        (``ha/metadata.py``); this broker's config-file users still win, in memory only
        (the file stays byte-equal to the master's). Readers see the old or the new table."""
        users, rules = _load(self.path)
        with self._lock:
            users.update(self._configured)
            self._users, self._rules = users, rules

    # ---- users --------------------------------------------------------------------------

    def bootstrap(self, users: Iterable[User]) -> None:
        """Write the users of the broker's config (they win over stored ones)."""
        with self._lock:
            for user in users:
                self._users[user.access_key] = user
                self._configured[user.access_key] = user
            self._save()

    def user(self, access_key: str) -> User | None:
        return self._users.get(access_key)

    def secret_of(self, access_key: str) -> str | None:
        user = self._users.get(access_key)
        return user.secret_key if user is not None else None

    def create_user(
        self, access_key: str, secret_key: str, *, superuser: bool = False, update: bool = False
    ) -> tuple[User, bool]:
        """Add a user (or, with ``update``, replace one); (user, created)."""
        user = User(validate_access_key(access_key), validate_secret_key(secret_key), superuser)
        with self._lock:
            existed = access_key in self._users
            if existed and not update:
                raise InvalidArgumentError(f"user {access_key!r} already exists")
            if access_key in self._configured:
                raise InvalidArgumentError(
                    f"user {access_key!r} is defined in the broker's config file; change it there"
                )
            self._users[access_key] = user
            self._save()
        return user, not existed

    def delete_user(self, access_key: str) -> None:
        """Forget a user and its rules."""
        with self._lock:
            if access_key not in self._users:
                raise NotFoundError(f"user {access_key!r} does not exist")
            if access_key in self._configured:
                raise InvalidArgumentError(
                    f"user {access_key!r} is defined in the broker's config file; remove it there"
                )
            del self._users[access_key]
            self._rules.pop(access_key, None)
            self._save()

    def users(self) -> list[User]:
        return sorted(self._users.values(), key=lambda u: u.access_key)

    # ---- rules --------------------------------------------------------------------------

    def rules_of(self, access_key: str) -> list[Rule]:
        return self._rules.get(access_key, [])

    def create_acl(self, access_key: str, rule: Rule) -> None:
        """Give a user a rule (replacing its rule for the same resource and decision)."""
        with self._lock:
            if access_key not in self._users:
                raise NotFoundError(f"user {access_key!r} does not exist; create it first")
            kept = [
                r
                for r in self._rules.get(access_key, [])
                if (r.resource, r.decision) != (rule.resource, rule.decision)
            ]
            self._rules[access_key] = [*kept, rule]
            self._save()

    def delete_acl(self, access_key: str, resource: str | None = None) -> int:
        """Remove a user's rules for ``resource`` (all its rules when None); how many."""
        with self._lock:
            rules = self._rules.get(access_key, [])
            if resource is not None:
                check_pattern(resource)
            kept = [r for r in rules if resource is not None and r.resource != resource]
            removed = len(rules) - len(kept)
            if not removed:
                raise NotFoundError(
                    f"user {access_key!r} has no rule" + (f" for {resource}" if resource else "")
                )
            self._rules[access_key] = kept
            self._save()
            return removed

    def acls(self, access_key: str | None = None) -> dict[str, list[Rule]]:
        with self._lock:
            return {
                k: list(v)
                for k, v in sorted(self._rules.items())
                if v and (access_key is None or k == access_key)
            }

    # ---- persistence --------------------------------------------------------------------

    def _save(self) -> None:
        data: dict[str, Any] = {
            "users": [
                {"access_key": u.access_key, "secret_key": u.secret_key, "superuser": u.superuser}
                for u in self.users()
            ],
            "acls": {k: [r.to_dict() for r in v] for k, v in sorted(self._rules.items()) if v},
        }
        write_private_json(self.path, data)


def write_private_json(path: Path, data: Any) -> None:
    """``write_json_atomic`` with the file readable by the broker's user only (0600)."""
    old_umask = os.umask(0o077)
    try:
        write_json_atomic(path, data)
    finally:
        os.umask(old_umask)
    os.chmod(path, 0o600)


def _load(path: Path) -> tuple[dict[str, User], dict[str, list[Rule]]]:
    data = read_json_table(path, "users and ACLs").data or {}
    users = {
        u["access_key"]: User(u["access_key"], u["secret_key"], bool(u.get("superuser")))
        for u in data.get("users", [])
    }
    rules = {key: [Rule.from_dict(r) for r in v] for key, v in data.get("acls", {}).items()}
    return users, rules
