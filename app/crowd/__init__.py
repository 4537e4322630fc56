"""Crowd platforms: publishing a study's HITs, syncing submissions, paying (DESIGN.md §2).

Where things live:

- `base`: the provider interface; `platform`: what a platform declares (its capabilities
  and hooks); `registry`: the platforms by name (`PLATFORMS`), which everything that
  differs between platforms asks, never a platform's name;
- `platforms/<name>/`: one package per platform, its client, provider, fees and
  declaration: `mturk` (boto3), `prolific` (httpx) and `local` (invite links: no
  platform, our store the source of truth; every call is bookkeeping in the same ledger,
  a block is our own block, expire closes the links to new work);
- `common`: errors, `provider_for`, tokens, pacing (none where no platform is reached),
  posting lookup and status, `PostingSpec` building, `platform_ref` (the platform's id of
  an assignment's work), `work_of` and `confirmed` (whose work an assignment is: a posting
  reviews and pays only its own, never another environment's);
- `postings`, `publishing`: the checks before publishing, the posting and the cost
  estimate; the posting's units and `publish` (which reopens an expired posting);
- `sync`: reconciling the platform's submissions with ours, flags, `sync`; `recovery`:
  a lost MTurk submission read from its answer XML (next-word slots or ratings) and
  stored through the annotation services, one savepoint per assignment;
- `ledger`, `calls`: one money or standing call (`ledger.CallRequest`), ledgered
  (`begin_call` ... the driver `calls.money_call`), with `guards` (what is refused
  before a call; proof that an uncertain bonus was paid or not);
- `claims`: writer units of work, row locks and the claims of a publish run;
- `flagged`: the submissions a sync flagged that we never stored (rejectable by id);
- `payments`: approve, reject, bonus, block, unblock, expire, balance, bulk approval
  (reopen is made by `publish`);
- `bonuses`, `overview`: bulk bonuses with a preview, and what the Crowd page shows;
- `audience`: who may take part through a platform (its prescreeners from the study file,
  the earlier studies excluded), as a posting carries it and as the Crowd page shows it;
- `batch`, `imports`: the offline MTurk-format batch export and results import.

The dashboard and the CLI call the same functions; providers only talk to their platform.

**Transactions.** Services flush and the caller commits, except where a platform call
must sit between two commits: a ledger row with its deterministic token (`CrowdHit`,
`CrowdCall`) is committed *before* the call and its outcome *after* it, so a crash
between the two leaves a row that the next run finishes with the same token (the
platform answers "already done") instead of making the call twice. So there are two
layers:

- **steps** take a `Session` and only flush, like every service: `open_posting`,
  `estimate` (postings), `plan_units`, `claim_unit`, `finish_unit`, `fail_unit` (publishing),
  `reconcile` (sync), `begin_call`, `finish_call`, `fail_call` (ledger), `review_plan`
  (payments);
- **drivers** (`publish`, `sync`, `money_call`, `approve`, `approve_all`, `reject`,
  `bonus`, `block`, `unblock`, `expire`, `balance`) take a session factory and run each
  step in its own writer unit of work (`claims.writing`), one unit (one HIT, one call)
  at a time, with the platform call between two of them. They are transaction owners
  like a CLI command or a worker step: the dashboard and the CLI call them with their
  session factory and commit nothing themselves.

Every money or standing call is written to the ledger before it is made, is made at most
once when it succeeded (a second approve is a no-op), records its outcome on the
assignment (`review_status`, `reviewed_at`, `bonus_cents`, `review_error`), is audited,
and raises when it failed: never swallowed.
"""
