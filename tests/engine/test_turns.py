"""engine.router.turns.RoundBatcher: the adaptive batching the router's shard reads and
a gateway's engine-host calls share."""

from __future__ import annotations

import asyncio

from engine.router.turns import RoundBatcher


class Recorder:
    """A destination per key; each message answers its items doubled once ``release`` is set."""

    def __init__(self):
        self.messages: list[tuple[object, list]] = []
        self.seen_at_answer: list[int] = []  # how many messages had been sent when each answer began
        self.release = asyncio.Event()
        self.release.set()

    def send(self, dest, items):
        self.messages.append((dest, [item for item, _ in items]))

        async def answer():
            self.seen_at_answer.append(len(self.messages))
            await self.release.wait()
            for item, fut in items:
                if item == "boom":
                    fut.set_exception(ValueError(item))
                else:
                    fut.set_result(item * 2)
        return answer()


def test_calls_of_one_turn_go_as_one_message_per_destination():
    async def go():
        rec = Recorder()
        b = RoundBatcher(rec.send)
        futs = [b.submit("a", 1), b.submit("b", 2), b.submit("a", 3)]
        assert rec.messages == []  # nothing leaves before the turn ends
        assert await asyncio.gather(*futs) == [2, 4, 6]
        assert rec.messages == [("a", [1, 3]), ("b", [2])] and b.messages == 2
        assert rec.seen_at_answer == [2, 2]  # both sent by one flush, before either answer began
        await asyncio.sleep(0)
        return b.rounds

    assert asyncio.run(go()) == 0


def test_calls_wait_while_max_rounds_are_in_flight_then_go_together():
    async def go():
        rec = Recorder()
        rec.release.clear()
        b = RoundBatcher(rec.send, max_rounds=2)
        first = b.submit(None, 1)
        await asyncio.sleep(0)
        second = b.submit(None, 2)
        await asyncio.sleep(0)
        waiting = [b.submit(None, k) for k in (3, 4, 5)]
        await asyncio.sleep(0.01)
        sent_while_full = [items for _, items in rec.messages]
        rec.release.set()
        got = await asyncio.gather(first, second, *waiting)
        return sent_while_full, [items for _, items in rec.messages], got

    sent_while_full, sent, got = asyncio.run(go())
    assert sent_while_full == [[1], [2]]  # two rounds in flight: 3, 4, 5 wait
    assert sent == [[1], [2], [3, 4, 5]] and got == [2, 4, 6, 8, 10]


def test_an_error_reaches_only_its_caller():
    async def go():
        b = RoundBatcher(Recorder().send)
        ok, bad = b.submit("x", 1), b.submit("x", "boom")
        return await asyncio.gather(ok, bad, return_exceptions=True)

    ok, bad = asyncio.run(go())
    assert ok == 2 and isinstance(bad, ValueError)
