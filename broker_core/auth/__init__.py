"""Authentication (signed requests), authorization (ACL 2.0 style) and the audit log."""
