"""Annotators: invite links, assignments, submissions, crowd channels.

By concept: `identities` (links, crowd identities, entry checks, the annotator's lock),
`leases` (claims of replica slots, returns, expiry; its docstring says how concurrent
requests are kept apart), `content` (a HIT's immutable content and its cache),
`submissions` (answers checked, resolved and stored), `pages` (one call per annotator page
action, for app.web.annotate), `queries` (every prebuilt statement, and the rules they
share), `errors`, `schemas` (what the pages get), `admin` (the researcher's side).
"""
