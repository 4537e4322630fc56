"""Where the sampler's texts sit in the model's slots, and how large the slots are.

`SlotLayout` is the part of `worker.sampler.ContinuousSampler` that arranges its rows: waiting
texts take free slots; rows are kept in bands of slots by width, narrowest first, so that a
forward's attention reads each band's width for its rows (`worker.hf_steps.row_groups`), not
the widest row's for everyone; in the tail the live rows are packed to the front and the
slots shrink; with a memory budget the slots' cache never passes it (rows pause, or go back to
the queue).  A move of a row is a swap of two slots (`CausalLM.swap_slots`), which the model
batches with the step's other moves.

It works on the sampler's state: ``model``, ``state`` (the slots), ``rows`` (the `_Row` in each
slot, or None), ``queue``, ``batch``, ``memory``, ``narrow``, ``band_limits``, ``starts``,
``paused`` and ``extra``; and asks the sampler for ``_used`` (a row's columns), ``_next_row``,
``_free`` and ``_extra``.
"""

from __future__ import annotations

from typing import Any

from worker.models import grown_columns


class SlotLayout:
    """The slots' arrangement of `worker.sampler.ContinuousSampler` (the module docstring)."""

    def _swap(self, a: int, b: int) -> None:
        rows = self.rows
        self.model.swap_slots(self.state, a, b)
        rows[a], rows[b] = rows[b], rows[a]
        for i in (a, b):
            if rows[i] is not None:
                rows[i].slot = i

    def _band_end(self, j: int) -> int:
        return self.starts[j + 1] if j + 1 < len(self.starts) else len(self.rows)

    def _refill(self) -> None:
        """Waiting texts take the free slots, and the slots are sized for the next forward.

        A free slot in a band of wider rows is first handed down to the narrowest band (the
        band's first row moves into it).  With a memory budget the cache (slots x columns x KV
        bytes a token: one dense buffer, so the widest row sets every slot's width) never
        passes it (`_fit`).  In the tail (nothing waiting) the live rows are packed to the
        front (a forward covers only those) and the slots shrink when half are free."""
        model, rows, starts = self.model, self.rows, self.starts
        live = sum(r is not None for r in rows)
        limit = len(rows) if self.memory is None else self._row_limit()
        more = min(limit, live + len(self.queue)) - len(rows)
        if self.queue and more > 0:
            # The budget holds more slots than there are (a wide row has left): add them, the
            # columns cut to what the budget allows at that many (never below a live row's).
            kv = model.kv_bytes_per_token
            held = max((self._used(r) for r in rows if r is not None), default=1)
            most = int(self.memory // ((len(rows) + more) * kv))
            width = max(held, min(model.slot_columns(self.state), most))
            model.resize_slots(self.state, len(rows) + more, width)
            rows += [None] * more
        if self.queue:
            for j in range(len(starts) - 1, 0, -1):
                for f in range(starts[j], self._band_end(j)):
                    if rows[f] is None:
                        if f != starts[j]:
                            self._swap(starts[j], f)
                        starts[j] += 1
        self.paused = set()
        for i, r in enumerate(rows):
            if r is None and self.queue and live < limit:
                new = self._next_row(*self.queue.popleft())
                new.slot = i
                model.clear_slots(self.state, [i])
                rows[i] = new
                live += 1
        self.extra = self._extra()
        if self.memory is not None:
            self._fit()
            return
        if not self.queue and live <= len(rows) // 2:
            self._pack()
            target = max(1, live)
            model.resize_slots(self.state, target)
            del rows[target:]
            self.starts = [min(b, target) for b in self.starts]
        need = self._need()
        if need > model.slot_columns(self.state):
            model.resize_slots(self.state, len(rows), self._wider(need))

    def _wider(self, need: int, most: int | None = None) -> int:
        """Columns to widen the slots to (`worker.models.grown_columns`)."""
        return grown_columns(self.model.slot_columns(self.state), need, most)

    def _need(self) -> int:
        """Columns the next forward may write to (an upper bound): each fed row's used columns
        and its tokens this step (one, or with speculation 1 + ``self.extra``)."""
        q = 1 + self.extra
        return max(
            (self._used(r) + q for r in self.rows if r is not None and r not in self.paused),
            default=0,
        )

    def _row_limit(self) -> int:
        """Rows the memory budget allows: at the width of the widest live row or at what a row
        is expected to hold (``self.narrow``), whichever is more."""
        widest = max((self._used(r) + 1 for r in self.rows if r is not None), default=0)
        per_row = max(widest, self.narrow) * self.model.kv_bytes_per_token
        return max(1, min(self.batch, int(self.memory // per_row)))

    def _fit(self) -> None:
        """Keep the slots' cache within the memory budget for the next forward.

        Slots x columns x KV bytes a token must stay within ``self.memory``.  When a row needs
        more columns than that allows: speculation keeps what fits; then the rows that need too many
        columns for the rows now live pause (they keep their slot and are not fed, and no new
        row comes in) until enough others have finished and the slots have shrunk to the live
        rows; when every live row would pause, the narrowest go back to the front of the queue
        (their work is redone, from the same random stream) until the rest fit.  The slots are
        packed to the live rows whenever the budget binds, and their columns shrink back when
        the widest row has left and fewer rows than the batch fit (one copy), so the rows grow
        back.  A single row wider than the whole budget still runs (nothing smaller exists)."""
        model, rows = self.model, self.rows
        kv, budget = model.kv_bytes_per_token, self.memory
        live = [r for r in rows if r is not None]
        if not live:
            return
        columns = model.slot_columns(self.state)

        def fits(n_rows: int, n_columns: int) -> bool:
            return n_rows * n_columns * kv <= budget

        need = self._need()
        if not fits(len(live), need) and self.extra:
            # As many speculative words as fit (each takes a column of every slot).
            self.extra = max(0, min(self.extra, budget // (len(live) * kv) - (need - self.extra)))
            need = self._need()
        if not fits(len(live), need):
            most = budget // (len(live) * kv)
            self.paused = {r for r in live if self._used(r) + 1 > most}
            while len(self.paused) == len(live) and len(live) > 1:
                r = min(live, key=self._used)
                self._evict(r)
                live.remove(r)
                most = budget // (len(live) * kv)
                self.paused = {r for r in live if self._used(r) + 1 > most}
            if len(live) == 1:
                self.paused = set()
            need = self._need()
        target = len(rows)
        held = max(self._used(r) for r in live)  # columns the live rows hold now
        if not fits(len(rows), max(need, columns)) or (
            not self.queue and len(live) <= len(rows) // 2
        ):
            self._pack()
            target = len(live)
        width = columns
        if need > columns:
            width = self._wider(need, most=budget // (target * kv))
        elif not fits(target, columns):
            width = max(held, need)
        if target != len(rows) or width != columns:
            model.resize_slots(self.state, target, width)
            del rows[target:]
            self.starts = [min(b, target) for b in self.starts]

    def _paused_last(self) -> None:
        """Move paused rows after every fed one: a forward covers the slots up to the last fed
        row and pads each slot it covers by the step's tokens, so a paused (full) slot inside it
        would need columns the budget does not hold."""
        rows = self.rows
        paused = sorted((r for r in self.paused), key=lambda r: r.slot)
        fed = sorted(
            (r for r in rows if r is not None and r not in self.paused), key=lambda r: -r.slot
        )
        for p, f in zip(paused, fed, strict=False):
            if f.slot < p.slot:
                break
            self._swap(p.slot, f.slot)

    def _evict(self, r: Any) -> None:  # a `worker.sampler` row
        """Put a row's text back at the front of the queue; it starts again from the beginning
        of its phase with the same random stream (so its result does not change)."""
        if r.search is not None:  # its prefix is done (the draft's ``ids``): search again
            self.queue.appendleft((r.draft, 0, 2))
        else:
            if r.rng_state is not None:
                r.draft.rng.bit_generator.state = r.rng_state
            self.queue.appendleft((r.draft, r.attempt, r.phase))
        self._free(r)

    def _pack(self) -> None:
        """Move the live rows to the front (a forward covers only those), band after band, so
        that the bands stay apart.  This runs every step that leaves a slot free: a free slot
        below the last live row would be a padded row of every forward, costing a whole row's
        compute, where packing moves a row of each band above the free slot (a copy of their
        columns, once).  With packing only once half the slots were free, 16 % of the forward
        positions of 400 items at l = 20 on GPT-2 small's shape were such padding (2026-11-26)."""
        rows, starts = self.rows, self.starts
        live = [i for i, r in enumerate(rows) if r is not None]
        if not live or live[-1] == len(live) - 1:
            return  # the live rows already fill the first slots
        first = 0
        for j in range(len(starts)):
            band = [r for r in rows[starts[j] : self._band_end(j)] if r is not None]
            end = first + len(band)
            holes = [i for i in range(first, end) if rows[i] is None]
            for hole, r in zip(holes, [r for r in band if r.slot >= end], strict=True):
                self._swap(r.slot, hole)
            starts[j] = first
            first = end

    def _place(self) -> None:
        """Rows that grew past their band's width move up to the next band (the bands are
        contiguous runs of slots, narrowest first, at most a quarter, half and all of
        ``self.narrow`` columns wide, then the rest): the forward's attention then reads each
        band's width for its rows (`worker.hf`), not the widest row's for everyone."""
        rows, starts, limits = self.rows, self.starts, self.band_limits
        for j, limit in enumerate(limits):
            i = starts[j]
            while i < starts[j + 1]:
                r = rows[i]
                if r is not None and self._used(r) >= limit:
                    starts[j + 1] -= 1
                    if i != starts[j + 1]:
                        self._swap(i, starts[j + 1])
                    continue
                i += 1
