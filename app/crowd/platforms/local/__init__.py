"""The local channel (invite links): `provider` (`LocalProvider`, bookkeeping over our own
store) and `platform` (its capabilities)."""
