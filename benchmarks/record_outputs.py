"""Record what researchers and participants see of two seeded studies, one of each type, into a
folder: run it before and after a refactor and compare the folders (``diff -r``) to show that
the refactor changed none of it.

Run from the repository root::

    .venv/bin/python benchmarks/record_outputs.py OUT_DIR

What it does, on a new SQLite database in a temporary folder, as a researcher and the
annotators would (through the CLI, the dashboard, the annotator pages and the API, each
in process; only the simulated crowds go through a server of their own, as
``ebc simulate-http`` does):

1. an administrator (``ebc admin create-user``), two studies from study files
   (``ebc study create``): ``nw``, a next-word study (lengths 3 and 5, data, model and
   ``data_shuffled`` prefixes, a reference model, 2 replicas and an overlap share), and
   ``rt``, a ratings study (a prompt, continuations of 5 words, 3 ratings per pair); both
   take panel and MTurk (sandbox) workers besides invited ones. Items by the worker with the
   fake model backend (``worker.fake``: ``fake:3``, reference ``fake:5``), HITs built by
   ``ebc hits build`` (with a researcher's attention file for ``nw``);
2. invited annotators (the dashboard's invite form, their links from ``links.csv``) do HITs
   through their links with seeded answers: attentive ones, one too fast, one careless on
   attention items, one who answers "none" often, one later blocked with their past work
   excluded; refused forms (incomplete, off the scale, out of order), a repeat with other
   answers, a HIT given back, ratings left unfinished; a panel participant (the panel entry
   URL) and an MTurk worker (the ExternalQuestion page; unverified work) do one HIT each;
3. a simulated crowd does more (``ebc simulate-http`` against ``background_server``), and
   the ratings study's EB-M is scored (``ebc results score``);
4. every output is recorded: the API's results documents (every estimator, unit, interval
   method and exclusion option; a ratings study's options) and its downloads (CSV, LaTeX,
   JSON, JSON lines, SVG), the dashboard's pages of each study (study, items, annotators,
   results with options, simulate, crowd) and its downloads, the CLI's results, diagnostics,
   EB-M, simulations and MTurk-format batch, the annotator pages as served (HIT, rating
   steps, refusals, messages, MTurk preview and done pages), and the answers refused for a
   study of the other type (4xx bodies).

Masked, because they differ from run to run whatever the code: timestamps (ISO dates and
times, ``<time>``), the seconds a computation took (``"seconds"``, ``"<seconds>"``), CSRF
tokens, invite-link tokens and nonces, assignments' public ids (each replaced by a name
that says whose it is, e.g. ``<assignment 12>``), and the git revision the results record
(``app.software.git_revision`` is replaced for the run, so the checkout's state does not
show). ``index.tsv`` lists every file with the status and media type it was served with.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import shutil
import sys
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import parse_qs, urlencode, urlsplit

SECRET_KEY = "record-outputs-secret-key-0123456789abcdef"
BASE_URL = "http://testserver"
PASSWORD = "record outputs password"
B = 200  # bootstrap resamples of the option grid (the default 10,000 is recorded once)

WORDS = (
    "the", "cat", "dog", "sat", "ran", "on", "a", "mat", ",", ".", "and", "big", "red", "house",
    "saw", "it",
)  # fmt: skip


def corpus(n: int = 300) -> str:
    """Lines of 9 to 14 words over the fake model's words, distinct in their first three."""
    base = len(WORDS)
    lines = []
    for i in range(n):
        head = [WORDS[(i // base**d) % base] for d in range(3)]
        lines.append(" ".join(head + list(WORDS[i % 7 : i % 7 + 6 + i % 6])))
    return "\n".join(lines) + "\n"


NEXTWORD_TOML = """
slug = "nw"
title = "Next words & <b>co</b>"
description = "A recorded next-word study: =formula, \\"quotes\\" and <tags>."
task = "lm"
type = "nextword"
prefix_lengths = [3, 5]
kinds = ["data", "model", "data_shuffled"]
items_per_cell = 24
seed = 7

[model]
name = "fake:3"

[dataset]
path = "{dataset}"

[reference]
model = "fake:5"

[hits]
mix = {{ data = 4, model = 4, data_shuffled = 2 }}
attention = 1
replicas = 2
overlap_share = 0.25
overlap_replicas = 3

[annotators]
min_seconds_per_item = 1.0
per_annotator_cap = 3

[payment]
reward_cents = 60
platform_fee = 0.2

[channels.panel]
enabled = true
completion_code = "C0DE42"
redirect_url = "https://panel.example/done?c=C0DE42"

[channels.mturk]
enabled = true
sandbox = true
min_approval_rate = 95
"""

RATINGS_TOML = """
slug = "rt"
title = "Ratings & <i>co</i>"
description = "A recorded ratings study."
task = "lm"
type = "ratings"
prefix_lengths = [3, 5]
kinds = ["data", "model"]
items_per_cell = 20
prompt_words = 2
seed = 11

[model]
name = "fake:3"

[dataset]
path = "{dataset}"

[hits]
mix = {{ data = 5, model = 5 }}
attention = 1
replicas = 3
overlap_share = 0.0

[annotators]
min_seconds_per_item = 1.0
per_annotator_cap = 2

[payment]
reward_cents = 80

[ratings]
continuation_words = 5
scale_max = 5
step = 0.5

[channels.panel]
enabled = true
completion_code = "RATE42"

[channels.mturk]
enabled = true
sandbox = true
"""

# A researcher's attention file for `nw` (ebc hits build --attention): words of the study's
# lengths, an unambiguous answer, top_k - 1 distractors.
ATTENTION = [
    {"words": "one two three", "answer": "four", "distractors": ["cat", "mat", "red", "ran"]},
    {"words": "a b c", "answer": "d", "distractors": ["dog", "sat", "big", "house"]},
    {"words": "x y z", "answer": "end", "distractors": ["the", "on", "saw", "it"]},
    {"words": "red green blue", "answer": "yellow", "distractors": ["cat", "a", "and", "mat"]},
    {"words": "one two three four five", "answer": "six", "distractors": ["cat", "sat", "a", "it"]},
    {"words": "a b c d e", "answer": "f", "distractors": ["dog", "ran", "big", "the"]},
    {"words": "mon tue wed thu fri", "answer": "sat", "distractors": ["mat", "on", "red", "saw"]},
    {"words": "i ii iii iv v", "answer": "vi", "distractors": ["house", "and", "cat", "dog"]},
]

MTURK_SUBMIT_TO = "https://workersandbox.mturk.com"
FORMULA_START = "=+-@\t\r"
CSRF = re.compile(r'name="csrf_token" value="([^"]+)"')


@dataclass
class Output:
    body: bytes
    status: int = 200
    media_type: str = ""


@dataclass
class Recorder:
    """Outputs by file name, masked and written at the end (the masks need the whole run)."""

    outputs: dict[str, Output] = field(default_factory=dict)
    names: dict[str, str] = field(default_factory=dict)  # random string -> stable name

    def add(self, name: str, body: str | bytes, status: int = 200, media_type: str = "") -> None:
        if name in self.outputs:
            raise ValueError(f"recorded twice: {name}")
        data = body.encode() if isinstance(body, str) else body
        self.outputs[name] = Output(data, status, media_type)

    def response(self, name: str, r) -> None:
        self.add(name, r.content, r.status_code, r.headers.get("content-type", ""))

    def write(self, out: Path) -> None:
        if out.exists():
            shutil.rmtree(out)
        out.mkdir(parents=True)
        lines = []
        for name in sorted(self.outputs):
            o = self.outputs[name]
            body = self.mask(o.body)
            path = out / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(body)
            lines.append(f"{name}\t{o.status}\t{o.media_type}")
        (out / "index.tsv").write_text("\n".join(lines) + "\n")

    def mask(self, body: bytes) -> bytes:
        if name_is_binary(body):
            return body
        text = body.decode("utf-8")
        for secret in sorted(self.names, key=len, reverse=True):
            if secret[:1] in FORMULA_START:  # a CSV cell neutralised with a quote, or not
                text = text.replace("'" + secret, self.names[secret])
            text = text.replace(secret, self.names[secret])
        for pattern, repl in MASKS:
            text = pattern.sub(repl, text)
        return text.encode()


def name_is_binary(body: bytes) -> bool:
    try:
        body.decode("utf-8")
    except UnicodeDecodeError:
        return True
    return False


MASKS: list[tuple[re.Pattern[str], str]] = [
    (
        re.compile(
            r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(?::\d{2}(?:\.\d{1,6})?)?(?:Z|[+-]\d{2}:?\d{2})?"
        ),
        "<time>",
    ),
    (re.compile(r'("seconds": ?)[0-9.e+-]+'), r'\1"<seconds>"'),
    (re.compile(r'(name=\\?"csrf_token\\?" value=\\?")[^"\\]+'), r"\1<csrf>"),
    (re.compile(r"\d+ ms per replication"), "<n> ms per replication"),
    (re.compile(r"(Computed|Simulated) in [0-9.]+ s"), r"\1 in <n> s"),
    # The precompute table's items per second (the cell after a progress bar).
    (re.compile(r"(</progress></td>(?:\s|\\n)*<td>)[0-9.]+(</td>)"), r"\1<n>\2"),
]


# -- the god-view of the answers: what an honest annotator would pick ---------------------------


def hit_truth(make_session, public_id: str) -> list[tuple[int, list, str, bool, int]]:
    """Per position of the assignment's HIT: (position, screen order, kind, attention,
    item id)."""
    from sqlalchemy import select

    from app.models import Assignment, HitPosition, Item

    with make_session() as session:
        hit_id = session.scalar(select(Assignment.hit_id).where(Assignment.public_id == public_id))
        rows = session.execute(
            select(HitPosition.position, HitPosition.choice_order, Item.kind, Item.is_attention,
                   Item.id)
            .join(Item, Item.id == HitPosition.item_id)
            .where(HitPosition.hit_id == hit_id)
            .order_by(HitPosition.position)
        ).all()  # fmt: skip
    return [tuple(r) for r in rows]


TOP1 = {"data": 0.55, "model": 0.45, "data_shuffled": 0.3}


def pick(rng: random.Random, style: str, order: list, kind: str, attention: bool) -> int:
    """The screen slot an annotator of `style` picks."""
    top = order.index(0)
    none = len(order) - 1
    others = [s for s in range(len(order)) if s != top]
    if attention:
        return rng.choice(others) if style == "careless" else top
    if style == "careless":
        return rng.randrange(len(order))
    if style == "noner" and rng.random() < 0.5:
        return none
    return top if rng.random() < TOP1.get(kind, 0.3) else rng.choice(others)


def rating_for(style: str, kind: str, attention: bool, item_id: int, step: str) -> str:
    if style == "careless":
        return "4"
    if attention:
        return "0.5"
    lenient = {"lenient": 0.5, "harsh": -0.5}.get(style, 0.0)
    quality = (3.5 if kind == "data" else 3.0) + lenient + 0.5 * (item_id % 2)
    value = quality if step == "quality" else quality - (0.5 if kind == "model" else 0.0)
    return f"{max(0.0, min(5.0, value)):g}"


# -- page forms ------------------------------------------------------------------------


def hidden_fields(html: str, form_id: str) -> tuple[str, dict[str, str]]:
    found = re.search(
        rf'<form method="post" action="([^"]*)" id="{form_id}"(.*?)</form>', html, re.S
    )
    if found is None:
        raise RuntimeError(f"no form {form_id} in the page:\n{html[:2000]}")
    fields = dict(
        re.findall(r'<input type="hidden" name="([^"]+)" value="([^"]*)"', found.group(2))
    )
    return found.group(1).replace("&amp;", "&"), fields


class Pages:
    """One annotator's pages, recorded under `prefix`: a counter keeps every page apart."""

    def __init__(self, rec: Recorder, client, prefix: str) -> None:
        self.rec, self.client, self.prefix, self.n = rec, client, prefix, 0

    def keep(self, what: str, r) -> None:
        self.n += 1
        self.rec.response(f"{self.prefix}/{self.n:02d}-{what}.html", r)

    def get(self, url: str, what: str = "page"):
        r = self.client.get(url, follow_redirects=False)
        self.keep(what, r)
        return r

    def post(self, url: str, data: dict, what: str):
        r = self.client.post(url, data=data, follow_redirects=False)
        if r.status_code != 303:
            self.keep(what, r)
        return r


def do_nextword_hit(pages: Pages, make_session, url: str, style: str, rng, *, tricks=()) -> str:
    """Open the link's page and answer its HIT; the page's kind ("hit", or a message)."""
    r = pages.get(url, "hit")
    if 'id="hit-form"' not in r.text:
        return "message"
    action, fields = hidden_fields(r.text, "hit-form")
    truth = hit_truth(make_session, fields["assignment"])
    answers = dict(fields)
    for position, order, kind, attention, _ in truth:
        answers[f"o{position}"] = str(pick(rng, style, order, kind, attention))
        answers[f"ms{position}"] = str(300 if style == "fast" else 2500 + 100 * position)
    if "incomplete" in tricks:
        partial = {k: v for k, v in answers.items() if k != "o0"}
        pages.post(action, partial, "refused-incomplete")
        bad = dict(answers, o1="9")
        pages.post(action, bad, "refused-option")
    done = pages.post(action, answers, "submitted")
    if done.status_code == 303 and "repeat" in tricks:
        other = dict(answers, o0=str((int(answers["o0"]) + 1) % (len(truth[0][1]))))
        pages.post(action, other, "kept")
    if done.status_code == 303:
        pages.get(done.headers["location"].replace(BASE_URL, ""), "after")
    return "hit"


def do_rating_hit(
    pages: Pages, make_session, url: str, style: str, *, tricks=(), stop_after: int | None = None
) -> str:
    """Rate the link's HIT step by step (at most `stop_after` steps)."""
    steps = 0
    truth: dict[int, tuple] = {}
    while True:
        r = pages.get(url, "step")
        if 'id="rating-form"' not in r.text:
            return "message" if steps == 0 else "done"
        action, fields = hidden_fields(r.text, "rating-form")
        if not truth:
            truth = {t[0]: t for t in hit_truth(make_session, fields["assignment"])}
        position, step = int(fields["position"]), fields["step"]
        _, _, kind, attention, item_id = truth[position]
        post = dict(fields, rating=rating_for(style, kind, attention, item_id, step))
        post["ms"] = "200" if style == "fast" else str(3000 + 10 * position)
        if steps == 0 and "refusals" in tricks:
            pages.post(action, dict(post, rating="7"), "refused-scale")
            pages.post(action, dict(post, rating=""), "refused-empty")
            pages.post(action, dict(post, step="consistency"), "refused-order")
        if steps == 2 and "repeat" in tricks:
            # The previous step's quality again, with another value: refused (409).
            pages.post(
                action,
                dict(post, position=str(position - 1), step="quality", rating="0"),
                "refused-locked",
            )
        done = pages.post(action, post, "rated")
        if done.status_code != 303:
            raise RuntimeError(f"a rating was refused: {done.status_code} {done.text[:500]}")
        steps += 1
        location = done.headers["location"].replace(BASE_URL, "")
        if "n=ok" in location or "n=late" in location:
            pages.get(location, "after")
            return "done"
        if stop_after is not None and steps >= stop_after:
            return "stopped"


# -- the run ---------------------------------------------------------------------------


class Run:
    def __init__(self, work: Path, rec: Recorder) -> None:
        from typer.testing import CliRunner

        self.work, self.rec = work, rec
        self.dataset = work / "corpus.txt"
        self.dataset.write_text(corpus())
        self.db = work / "recorded.db"
        self.env = {
            "EBC_DATABASE_URL": f"sqlite:///{self.db}",
            "EBC_SECRET_KEY": SECRET_KEY,
            "EBC_ENV": "test",
            "EBC_BASE_URL": BASE_URL,
            "EBC_LOG_LEVEL": "warning",
        }
        self.runner = CliRunner()
        self.cli_n = 0

    # -- the CLI ----------------------------------------------------------------------

    def cli(self, name: str | None, *args: str, ok: bool = True) -> str:
        from app.cli import cli, load_plugins

        load_plugins()
        done = self.runner.invoke(cli, list(args), env=self.env, catch_exceptions=False)
        text = done.stdout + (f"\n[stderr]\n{done.stderr}" if done.stderr else "")
        text += f"\n[exit {done.exit_code}]\n"
        if ok and done.exit_code != 0:
            raise RuntimeError(f"ebc {' '.join(args)} failed:\n{text}")
        if name is not None:
            self.cli_n += 1
            self.rec.add(f"cli/{self.cli_n:03d}-{name}.txt", text)
        return done.stdout

    # -- set-up -----------------------------------------------------------------------

    def settings(self):
        from app.config import Settings

        return Settings(
            database_url=self.env["EBC_DATABASE_URL"],
            secret_key=SECRET_KEY,
            env="test",
            base_url=BASE_URL,
        )

    def build(self) -> None:
        from app.db import build_engine, make_sessionmaker

        self.rec.names[str(self.work)] = "<work>"
        self.cli(None, "db", "upgrade")
        self.cli(None, "admin", "create-user", "ada", "--admin", "--password", PASSWORD)
        for slug, text in (("nw", NEXTWORD_TOML), ("rt", RATINGS_TOML)):
            path = self.work / f"{slug}.toml"
            path.write_text(text.format(dataset=self.dataset))
            self.cli(
                f"study-create-{slug}", "study", "create", "--config", str(path), "--owner", "ada"
            )
        self.engine = build_engine(self.settings())
        self.make_session = make_sessionmaker(self.engine)
        self.precompute()
        attention = self.work / "attention.jsonl"
        attention.write_text("".join(json.dumps(row) + "\n" for row in ATTENTION))
        self.cli("hits-build-nw", "hits", "build", "nw", "--attention", str(attention))
        self.cli("hits-build-rt", "hits", "build", "rt")
        self.cli(
            "hits-attention-rt", "hits", "build", "rt", "--attention", str(attention), ok=False
        )

    def precompute(self) -> None:
        """Plan each study's job and run the worker on it (the fake model, on the CPU)."""
        from sqlalchemy import select

        from app.models import Study
        from app.precompute.service import plan_precompute
        from worker.runner import Worker, WorkerOptions

        with self.make_session() as session, session.begin():
            for slug in ("nw", "rt"):
                study = session.scalar(select(Study).where(Study.slug == slug))
                plan_precompute(session, study, shard_size=8)
        Worker(self.settings(), WorkerOptions(once=True, device="cpu"), engine=self.engine).run()

    def app_client(self):
        from fastapi.testclient import TestClient

        from app.main import create_app

        return TestClient(create_app(self.settings()), base_url=BASE_URL)

    # -- the researcher's dashboard ---------------------------------------------------

    def login(self, client) -> str:
        page = client.get("/login")
        csrf = CSRF.search(page.text).group(1)
        data = {"username": "ada", "password": PASSWORD, "csrf_token": csrf}
        assert client.post("/login", data=data, follow_redirects=False).status_code == 303
        return CSRF.search(client.get("/dashboard").text).group(1)

    def invite(self, client, csrf: str, slug: str, count: int, label: str) -> list[str]:
        """Invite `count` annotators on the dashboard; their link paths, in label order."""
        data = {"csrf_token": csrf, "count": str(count), "label": label}
        r = client.post(
            f"/dashboard/studies/{slug}/annotators/invite", data=data, follow_redirects=True
        )
        self.rec.response(f"dashboard/{slug}/annotators-after-invite-{label}.html", r)
        links = client.get(f"/dashboard/studies/{slug}/annotators/links.csv").text
        rows = [line.split(",", 1) for line in links.strip().splitlines()[1:]]
        paths = [urlsplit(link).path for lab, link in rows if lab.startswith(label)]
        for lab, link in rows:
            token = urlsplit(link).path.rsplit("/", 1)[1]
            self.rec.names.setdefault(token, f"<token of {lab}>")
        return paths

    def annotator_id(self, slug: str, label: str) -> int:
        from sqlalchemy import select

        from app.models import Annotator, Study

        with self.make_session() as session:
            return session.scalar(
                select(Annotator.id)
                .join(Study, Study.id == Annotator.study_id)
                .where(Study.slug == slug, Annotator.label == label)
            )

    # -- the annotators ----------------------------------------------------------------

    def annotate(self, client, csrf: str) -> None:
        rec = self.rec
        # Next-word: five invited annotators, two or three HITs each.
        styles = ["good", "fast", "careless", "noner", "blocked"]
        paths = self.invite(client, csrf, "nw", len(styles), "lab")
        for n, (style, path) in enumerate(zip(styles, paths, strict=True)):
            pages = Pages(rec, client, f"annotate/nw/{n + 1}-{style}")
            rng = random.Random(f"nw-{style}")
            tricks = {0: ("incomplete",), 1: ("repeat",)}.get(n, ())
            if style == "noner":  # gives the first HIT back, then works
                r = pages.get(path, "hit")
                _, fields = hidden_fields(r.text, "hit-form")
                back = pages.post(f"{path}/return", {"assignment": fields["assignment"]}, "return")
                pages.get(back.headers["location"].replace(BASE_URL, ""), "after-return")
            for _ in range(3 if style == "good" else 2):  # the cap is 3
                do_nextword_hit(pages, self.make_session, path, style, rng, tricks=tricks)
                tricks = ()
        # Ratings: invited raters; one stops midway (an unfinished HIT).
        styles = ["good", "fast", "careless", "lenient", "blocked", "partial"]
        paths = self.invite(client, csrf, "rt", len(styles), "rater")
        for n, (style, path) in enumerate(zip(styles, paths, strict=True)):
            pages = Pages(rec, client, f"annotate/rt/{n + 1}-{style}")
            tricks = {0: ("refusals",), 1: ("repeat",)}.get(n, ())
            if style == "partial":
                do_rating_hit(pages, self.make_session, path, style, stop_after=5)
                continue
            if style == "lenient":  # gives the first HIT back after one rating, then works
                do_rating_hit(pages, self.make_session, path, style, stop_after=1)
                r = pages.get(path, "step")
                _, fields = hidden_fields(r.text, "rating-form")
                pages.post(f"{path}/return", {"assignment": fields["assignment"]}, "return")
            for _ in range(2 if style in ("good", "careless") else 1):  # the cap is 2
                do_rating_hit(pages, self.make_session, path, style, tricks=tricks)
                tricks = ()
        # Every link once more: the next HIT, or a message (cap reached, no work).
        for slug in ("nw", "rt"):
            links = client.get(f"/dashboard/studies/{slug}/annotators/links.csv").text
            for n, row in enumerate(links.strip().splitlines()[1:]):
                path = urlsplit(row.split(",", 1)[1]).path
                rec.response(f"annotate/{slug}/again-{n + 1}.html", client.get(path))
        self.crowd_workers(client)

    def crowd_workers(self, client) -> None:
        """A panel participant and an MTurk worker do one HIT of each study."""
        try:
            from app.crowd.platforms.prolific.entry import entry_url as panel_entry_url
        except ImportError:  # before the crowd platforms became packages (issue 31)
            from app.annotation.identities import panel_entry_url
        from app.studies.service import get_study

        rec = self.rec
        for slug in ("nw", "rt"):
            with self.make_session() as session:
                url = panel_entry_url(BASE_URL, SECRET_KEY, get_study(session, slug))
            query = {k: v[0] for k, v in parse_qs(urlsplit(url).query).items()}
            query.update(PROLIFIC_PID="5f0c" + "a" * 20, STUDY_ID="s" * 24, SESSION_ID="sess-1")
            pages = Pages(rec, client, f"annotate/{slug}/panel")
            entry = client.get(f"/p/{slug}?{urlencode(query)}", follow_redirects=False)
            rec.add(
                f"annotate/{slug}/panel/00-entry.txt", f"{entry.status_code}\n", entry.status_code
            )
            path = urlsplit(entry.headers["location"]).path
            rec.names.setdefault(path.rsplit("/", 1)[1], f"<token of the {slug} panel participant>")
            if slug == "nw":
                do_nextword_hit(pages, self.make_session, path, "good", random.Random(slug))
            else:
                do_rating_hit(pages, self.make_session, path, "good")
            pages.get(path, "finish")
            # MTurk: the preview, then an accepted assignment's page, done and submitted.
            pages = Pages(rec, client, f"annotate/{slug}/mturk")
            pages.get(f"/mturk/{slug}?assignmentId=ASSIGNMENT_ID_NOT_AVAILABLE&hitId=H1", "preview")
            ids = {
                "assignmentId": f"A{slug}1",
                "hitId": f"H{slug}1",
                "workerId": f"W{slug}1",
                "turkSubmitTo": MTURK_SUBMIT_TO,
            }
            page_url = f"/mturk/{slug}?{urlencode(ids)}"
            if slug == "nw":
                r = pages.get(page_url, "hit")
                action, fields = hidden_fields(r.text, "hit-form")
                truth = hit_truth(self.make_session, fields["assignment"])
                answers = dict(fields)
                rng = random.Random("mturk")
                for position, order, kind, attention, _ in truth:
                    answers[f"o{position}"] = str(pick(rng, "good", order, kind, attention))
                    answers[f"ms{position}"] = "2000"
                pages.post(action, answers, "done")
                pages.get(page_url, "again")
            else:
                truth: dict = {}
                while True:
                    r = pages.get(page_url, "step")
                    if 'id="rating-form"' not in r.text:
                        break
                    action, fields = hidden_fields(r.text, "rating-form")
                    if not truth:
                        truth = {
                            t[0]: t for t in hit_truth(self.make_session, fields["assignment"])
                        }
                    position, step = int(fields["position"]), fields["step"]
                    _, _, kind, attention, item_id = truth[position]
                    post = dict(
                        fields, rating=rating_for("good", kind, attention, item_id, step), ms="2500"
                    )
                    done = pages.post(action, post, "done")
                    if done.status_code != 303:
                        break

    def block(self, client, csrf: str) -> None:
        for slug, label in (("nw", "lab 5"), ("rt", "rater 5")):
            aid = self.annotator_id(slug, label)
            data = {
                "csrf_token": csrf,
                "reason": "recorded <block> & reason",
                "exclude_past": "true",
            }
            r = client.post(
                f"/dashboard/studies/{slug}/annotators/{aid}/block",
                data=data,
                follow_redirects=True,
            )
            self.rec.response(f"dashboard/{slug}/annotators-after-block.html", r)

    def simulated_crowds(self) -> None:
        from app.cli.server import background_server

        with background_server(self.settings()) as base:
            self.cli(
                "simulate-http-nw",
                "simulate-http",
                "nw",
                base,
                "--true-ebc",
                "1.1",
                "--max-hits",
                "4",
                "--seed",
                "3",
            )
            self.cli(
                "simulate-http-rt", "simulate-http", "rt", base, "--max-hits", "2", "--seed", "3"
            )
            self.cli(
                "simulate-http-nw-wrong", "simulate-http", "nw", base, "--quality", "3,2", ok=False
            )
            self.cli(
                "simulate-http-rt-wrong", "simulate-http", "rt", base, "--true-ebc", "1.1", ok=False
            )

    # -- what is recorded --------------------------------------------------------------

    def api(self, client, token: str) -> None:
        rec = self.rec
        h = {"Authorization": f"Bearer {token}"}

        def get(name: str, url: str) -> None:
            rec.response(f"api/{name}", client.get(url, headers=h))

        get("studies.json", "/api/v1/studies")
        for slug in ("nw", "rt"):
            s = f"/api/v1/studies/{slug}"
            get(f"{slug}/study.json", s)
            get(f"{slug}/manifest.json", f"{s}/manifest.json")
            get(f"{slug}/results-default.json", f"{s}/results")
            for fmt in ("csv", "jsonl"):
                get(f"{slug}/items.{fmt}", f"{s}/items.{fmt}")
                get(f"{slug}/judgments.{fmt}", f"{s}/judgments.{fmt}")
                get(f"{slug}/ratings.{fmt}", f"{s}/ratings.{fmt}")
                get(f"{slug}/samples.{fmt}", f"{s}/samples.{fmt}")
            for fmt in ("csv", "tex"):
                get(f"{slug}/ebm.{fmt}", f"{s}/results/ebm.{fmt}")
            for excl in ("on", "off"):
                q = f"b={B}&exclusions={excl}"
                get(f"{slug}/results.csv-{excl}", f"{s}/results.csv?{q}")
                get(f"{slug}/results.tex-{excl}", f"{s}/results.tex?{q}")
                get(f"{slug}/results-paper.tex-{excl}", f"{s}/results.tex?{q}&paper=true")
                get(f"{slug}/plot-{excl}.svg", f"{s}/plot.svg?{q}")
                get(f"{slug}/diagnostics-{excl}.json", f"{s}/results/diagnostics?{q}")
                get(f"{slug}/diagnostics-{excl}.csv", f"{s}/results/diagnostics.csv?{q}")
                get(f"{slug}/diagnostics-{excl}.svg", f"{s}/results/diagnostics.svg?{q}")
                get(f"{slug}/ratings_table-{excl}.csv", f"{s}/results/ratings_table.csv?{q}")
                get(f"{slug}/ratings_table-{excl}.tex", f"{s}/results/ratings_table.tex?{q}")
                get(
                    f"{slug}/ratings_table-paper-{excl}.tex",
                    f"{s}/results/ratings_table.tex?{q}&paper=true",
                )
            get(f"{slug}/plan.json", f"{s}/plan")
            get(f"{slug}/plan-1.05.json", f"{s}/plan?target_ebc=1.05&seed=2")
            get(f"{slug}/plan-halfwidth.json", f"{s}/plan?halfwidth=0.05&power=0.9")
            for extra in ("level=0.9", "seed=3", "estimator=plurality", "unit=hit", "ci=bca"):
                get(f"{slug}/results-{extra}.json", f"{s}/results?b={B}&{extra}")
            get(f"{slug}/results-bad.json", f"{s}/results?b=5")
        s = "/api/v1/studies/nw"
        for estimator in ("single", "plurality"):
            for unit in ("annotator", "twoway", "hit", "item"):
                for ci in ("wild", "percentile", "bca"):
                    for excl in ("on", "off"):
                        q = f"b={B}&estimator={estimator}&unit={unit}&ci={ci}&exclusions={excl}"
                        get(f"nw/grid/{estimator}-{unit}-{ci}-{excl}.json", f"{s}/results?{q}")
                get(
                    f"nw/grid/{estimator}-{unit}.csv",
                    f"{s}/results.csv?b={B}&estimator={estimator}&unit={unit}",
                )
                get(
                    f"nw/grid/{estimator}-{unit}.tex",
                    f"{s}/results.tex?b={B}&estimator={estimator}&unit={unit}",
                )
        s = "/api/v1/studies/rt"
        for excl in ("on", "off"):
            for level in ("0.95", "0.8"):
                get(
                    f"rt/grid/{excl}-{level}.json",
                    f"{s}/results?b={B}&exclusions={excl}&level={level}",
                )

    def dashboard(self, client, csrf: str) -> None:
        rec = self.rec

        def get(name: str, url: str) -> None:
            rec.response(f"dashboard/{name}", client.get(url))

        get("home.html", "/dashboard")
        get("new-study.html", "/dashboard/studies/new")
        for slug in ("nw", "rt"):
            d = f"/dashboard/studies/{slug}"
            get(f"{slug}/study.html", d)
            get(f"{slug}/progress.json", f"{d}/progress.json")
            get(f"{slug}/items.html", f"{d}/items")
            get(f"{slug}/annotators.html", f"{d}/annotators")
            get(f"{slug}/crowd.html", f"{d}/crowd")
            for provider in ("mturk", "prolific", "local"):
                get(
                    f"{slug}/crowd-publish-{provider}.html",
                    f"{d}/crowd/publish?provider={provider}",
                )
            get(f"{slug}/results-default.html", f"{d}/results")
            get(f"{slug}/results-b.html", f"{d}/results?b={B}")
            get(f"{slug}/results-off.html", f"{d}/results?b={B}&exclusions=off")
            get(
                f"{slug}/results-plurality.html",
                f"{d}/results?b={B}&estimator=plurality&unit=twoway",
            )
            get(f"{slug}/results-planner.html", f"{d}/results?b={B}&target_ebc=1.05&power=0.9")
            get(f"{slug}/results-halfwidth.html", f"{d}/results?b={B}&halfwidth=0.05")
            get(f"{slug}/results-bad.html", f"{d}/results?b=5")
            names = (
                "results.csv", "results.tex", "plot.svg", "manifest.json", "diagnostics.csv",
                "diagnostics.svg", "judgments.csv", "judgments.jsonl", "items.csv", "items.jsonl",
                "ratings_table.csv", "ratings_table.tex", "ratings.csv", "ratings.jsonl",
                "ebm.csv", "ebm.tex", "samples.csv", "samples.jsonl", "nothing.csv",
            )  # fmt: skip
            for name in names:
                get(f"{slug}/download/{name}", f"{d}/results/{name}?b={B}")
            get(f"{slug}/download/paper-results.tex", f"{d}/results/results.tex?b={B}&paper=true")
            get(
                f"{slug}/download/paper-ratings_table.tex",
                f"{d}/results/ratings_table.tex?b={B}&paper=true",
            )
            get(f"{slug}/simulate-form.html", f"{d}/simulate?replications=0")
        get(
            "nw/simulate.html", "/dashboard/studies/nw/simulate?replications=2&seed=1&true_ebc=1.05"
        )
        crowd = "crowd=noisy:0.2,fast:0.1&cgd_data=0.6"
        get("nw/simulate-crowd.html", f"/dashboard/studies/nw/simulate?replications=2&{crowd}")
        get("nw/simulate-bad.html", "/dashboard/studies/nw/simulate?replications=2&crowd=bogus")
        get("rt/simulate.html", "/dashboard/studies/rt/simulate?replications=2&seed=1")
        means = "quality=3.6,3.0&consistency=3.4,2.9&half_width=0.2"
        get("rt/simulate-means.html", f"/dashboard/studies/rt/simulate?replications=2&{means}")
        get("rt/simulate-bad.html", "/dashboard/studies/rt/simulate?replications=2&quality=9,1")
        get(
            "rt/simulate-nextword-field.html",
            "/dashboard/studies/rt/simulate?replications=2&true_ebc=1.1",
        )

    def cli_outputs(self) -> None:
        for slug in ("nw", "rt"):
            for fmt in ("table", "csv", "json", "latex"):
                self.cli(
                    f"results-{slug}-{fmt}", "results", slug, "-f", fmt, "--b", str(B), ok=False
                )
            self.cli(
                f"results-{slug}-paper",
                "results",
                slug,
                "-f",
                "latex",
                "--paper",
                "--b",
                str(B),
                ok=False,
            )
            self.cli(
                f"results-{slug}-off",
                "results",
                slug,
                "--exclusions",
                "off",
                "--b",
                str(B),
                ok=False,
            )
            self.cli(
                f"results-{slug}-estimator",
                "results",
                slug,
                "--estimator",
                "plurality",
                "--b",
                str(B),
                ok=False,
            )
            for fmt in ("table", "csv", "json"):
                self.cli(
                    f"diagnostics-{slug}-{fmt}",
                    "results",
                    "diagnostics",
                    slug,
                    "-f",
                    fmt,
                    "--b",
                    str(B),
                    ok=False,
                )
            for fmt in ("table", "csv", "json", "latex"):
                self.cli(f"ebm-{slug}-{fmt}", "results", "ebm", slug, "-f", fmt, ok=False)
            self.cli(
                f"simulate-{slug}",
                "simulate",
                slug,
                "--replications",
                "3",
                "--b",
                "200",
                "--seed",
                "2",
                ok=False,
            )
            self.cli(
                f"simulate-{slug}-local",
                "simulate",
                slug,
                "--replications",
                "2",
                "--b",
                "200",
                "--provider",
                "local",
                "--crowd",
                "noisy:0.2",
                ok=False,
            )
            batch = self.work / f"batch-{slug}"
            self.cli(
                f"export-batch-{slug}", "crowd", "export-batch", slug, "--out", str(batch), ok=False
            )
            for path in sorted(batch.glob("*")) if batch.exists() else []:
                self.rec.add(f"cli/batch-{slug}/{path.name}", path.read_bytes())
        self.cli("simulate-nw-raters", "simulate", "nw", "--quality", "3,2", ok=False)
        self.cli("simulate-rt-nextword", "simulate", "rt", "--true-ebc", "1.1", ok=False)
        self.cli("score-nw", "results", "score", "nw", ok=False)

    def masks(self) -> None:
        """Every assignment's public id and annotator's link nonce, named after its row."""
        from sqlalchemy import select

        from app.annotation.identities import invite_token
        from app.models import Annotator, Assignment

        with self.make_session() as session:
            for public_id, aid in session.execute(select(Assignment.public_id, Assignment.id)):
                self.rec.names[public_id] = f"<assignment {aid}>"
            for a in session.scalars(select(Annotator).order_by(Annotator.id)):
                if a.channel.value == "local" and a.external_id:  # made up at random
                    self.rec.names[a.external_id] = f"<external id of {a.id}>"
                if a.invite_nonce:
                    self.rec.names.setdefault(invite_token(SECRET_KEY, a), f"<token of {a.id}>")
                    self.rec.names[a.invite_nonce] = f"<nonce of {a.id}>"


def record(out: Path) -> int:
    import matplotlib

    import app.software

    matplotlib.rcParams["svg.hashsalt"] = "record-outputs"  # the SVGs' ids, else random

    # The git revision the results and items record differs from one checkout to another.
    app.software.git_revision.cache_clear()
    app.software.git_revision = lambda root=None: ("<git revision>", False)  # type: ignore[assignment]
    rec = Recorder()
    with tempfile.TemporaryDirectory(prefix="ebc-record-") as tmp:
        run = Run(Path(tmp), rec)
        run.build()
        from app.auth.service import create_api_token, user_by_name

        with run.make_session() as session, session.begin():
            token = create_api_token(session, user_by_name(session, "ada"), "recorder").secret
        with run.app_client() as client:
            csrf = run.login(client)
            run.annotate(client, csrf)
            run.block(client, csrf)
        run.simulated_crowds()
        run.cli("score-rt", "results", "score", "rt", "--b", "200")
        with run.app_client() as client:
            csrf = run.login(client)
            run.api(client, token)
            run.dashboard(client, csrf)
        run.cli_outputs()
        run.masks()
        run.engine.dispose()
    rec.write(out)
    return len(rec.outputs)


def main(argv: Iterable[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path, help="the folder to write (replaced)")
    args = parser.parse_args(list(argv) if argv is not None else None)
    n = record(args.out)
    print(f"{n} outputs recorded in {args.out}")


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    main()
