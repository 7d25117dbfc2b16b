from recalld.conversation import CONTEXT_CHARS, SHORT_TURN_CHARS, reply_context


def test_short_turns_borrow_the_end_of_the_previous_turn() -> None:
    previous = "x" * 1000 + " Got any favourite dance styles?"
    got = reply_context(previous, "Contemporary is my top pick!")
    assert got is not None and got.endswith("Got any favourite dance styles?")
    assert len(got) == CONTEXT_CHARS


def test_long_turns_and_first_turns_stand_alone() -> None:
    assert reply_context("a question?", "y" * (SHORT_TURN_CHARS + 1)) is None
    assert reply_context(None, "hello") is None
    assert reply_context("   ", "hello") is None
