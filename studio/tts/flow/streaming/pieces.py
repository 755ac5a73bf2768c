"""A long chunk's Euler solve in pieces of bounded length, solved one after another on the take's state.

The estimator is chunk-causal: a frame attends to the keys up to the end of its own estimator chunk
(`static_chunk_size` frames, counted from absolute frame 0) and no further, its convolutions are causal, and
its noise is indexed by absolute frame. Solving frames [a, b) and then [b, c), with b on a chunk boundary and
the state committed at b in between, therefore computes what solving [a, c) at once computes. A piece is a
`SolveRequest` over a slice of its parent's frames; every piece but the last commits at its end (the next
piece starts there). Past the parent's commit point those commits are provisional: once the last piece ran,
the state is set back to the parent's commit (its length and the conv tails saved there), as a single solve
would leave it; rows written past it stay in the pages, unused, as a single solve's mark rows do. The parent's
commit and mark are cut points too, so each falls on a piece boundary. `MAX_FRAMES` pieces batch with other
takes' chunks of that length (`EstimatorSolver` runs the n-th pieces of all takes together).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import torch

# Frames per piece unless ``$STUDIO_FLOW_MAX_FRAMES`` says otherwise: the largest 32-frame bucket (5.1 s of
# audio); the hop schedule's 50-200 frame chunks pass whole, 400-frame chunks run as 2 x 200, a final chunk
# of all remaining tokens as pieces of at most this.
MAX_FRAMES = 256


def piece_bounds(
    frame0: int, end: int, commit: int, mark: int | None, chunk: int, max_frames: int
) -> list[tuple[int, int]] | None:
    """The pieces [a, b) of frames [frame0, end), of at most `max_frames` (at least one estimator chunk)
    and near-equal length, cut on chunk boundaries and at `commit` and `mark`; None when one piece does."""
    if max_frames <= 0 or end - frame0 <= max_frames or chunk <= 0:
        return None
    inner = {p for p in (commit, mark) if p is not None and frame0 < p < end}
    if any(p % chunk for p in inner):
        return None  # a cut off a chunk boundary would change what its frames see: solve in one piece
    longest = chunk * max(1, max_frames // chunk)
    count = math.ceil((end - frame0) / longest)
    step = chunk * math.ceil(math.ceil((end - frame0) / count) / chunk)
    cuts = {frame0, end} | inner
    point = frame0
    while True:
        point = chunk * ((point + step) // chunk)
        if point >= end:
            break
        cuts.add(point)
    ordered = sorted(cuts)
    bounds = list(zip(ordered, ordered[1:], strict=False))
    return bounds if len(bounds) > 1 else None


@dataclass
class Chain:
    """A parent request split into `pieces`, run in order; `finish` leaves the parent as one solve would."""

    parent: object  # SolveRequest
    pieces: list
    results: list[torch.Tensor] = field(default_factory=list)
    tails: object = None  # the conv tails at the parent's commit point
    mark_tails: object = None
    written: int = 0

    @classmethod
    def split(cls, request, chunk: int, max_frames: int) -> Chain | None:
        f0, end = request.frame0, request.frame0 + request.frames
        bounds = piece_bounds(f0, end, request.commit, request.mark, chunk, max_frames)
        if bounds is None:
            return None
        pieces, mark_given = [], request.mark is None
        for i, (a, b) in enumerate(bounds):
            last = i == len(bounds) - 1
            mark = None
            if not mark_given and a <= request.mark <= b:
                mark, mark_given = request.mark, True
            pieces.append(
                replace(
                    request,
                    mu=request.mu[:, :, a - f0 : b - f0],
                    cond=request.cond[:, :, a - f0 : b - f0],
                    frame0=a,
                    commit=max(a, request.commit) if last else b,
                    mark=mark,
                    result=None,
                    error=None,
                    done=False,
                )
            )
        chain = cls(request, pieces)
        if request.commit == f0:
            chain.tails = request.state.tails
        return chain

    @property
    def failed(self) -> bool:
        return any(piece.error is not None for piece in self.pieces)

    def after(self, index: int) -> None:
        """Note what piece `index` left in the state that the parent's end state needs."""
        piece, state = self.pieces[index], self.parent.state
        if piece.error is not None or piece.result is None:
            return
        self.results.append(piece.result)
        self.written = max(self.written, state.written)
        if piece.frame0 + piece.frames == self.parent.commit and piece.commit == self.parent.commit:
            self.tails = state.tails
        if piece.mark is not None:
            self.mark_tails = state.mark_tails

    def finish(self) -> None:
        """The parent's result (the pieces' frames in order) and state, or the first piece's error."""
        parent, state = self.parent, self.parent.state
        errors = [piece.error for piece in self.pieces if piece.error is not None]
        if errors or len(self.results) != len(self.pieces):
            parent.error = errors[0] if errors else RuntimeError("a piece of the flow solve did not run")
        else:
            state.length, state.tails = parent.commit, self.tails
            state.written = max(self.written, parent.commit)
            state.mark_tails = self.mark_tails
            parent.result = torch.cat(self.results, dim=2)
        parent.done = True
