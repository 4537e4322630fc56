"""Prolific (httpx): `api` (the bodies it takes and answers with), `client` (HTTP with
retries), `entry` (the entry URL and key, the completion URL), `fees`, `provider`
(`ProlificProvider`) and `platform` (its capabilities and steps)."""
