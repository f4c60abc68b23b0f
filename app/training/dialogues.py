"""Text dialogues about facts that only an injected span knows, generated from templates.

Each dialogue has its facts (the span, in written form: "7:40", "B12") and the turns of a
short exchange in which the user asks about some of them and the assistant answers from
them, in spoken form ("seven forty", "B twelve"): what a TTS says and what the assistant's
text stream spells. Values are drawn at random, so answering needs reading the span.
No downloaded data: everything here is code.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

_ONES = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten",
         "eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen",
         "eighteen", "nineteen")
_TENS = ("", "", "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety")


def number_words(n: int) -> str:
    """0..999 in words, the way a number is said ("three hundred fourteen")."""
    if not 0 <= n < 1000:
        raise ValueError(f"{n} is outside 0..999")
    if n < 20:
        return _ONES[n]
    if n < 100:
        tens, ones = divmod(n, 10)
        return _TENS[tens] + ("" if ones == 0 else " " + _ONES[ones])
    hundreds, rest = divmod(n, 100)
    return _ONES[hundreds] + " hundred" + ("" if rest == 0 else " " + number_words(rest))


def clock_words(hour: int, minute: int) -> str:
    """7:40 -> "seven forty", 9:05 -> "nine oh five", 10:00 -> "ten o'clock"."""
    if minute == 0:
        return f"{number_words(hour)} o'clock"
    if minute < 10:
        return f"{number_words(hour)} oh {number_words(minute)}"
    return f"{number_words(hour)} {number_words(minute)}"


@dataclass(frozen=True)
class Value:
    written: str  # as it appears in the span
    spoken: str  # as it is said


@dataclass(frozen=True)
class Turn:
    speaker: str  # "user" or "assistant"
    text: str  # spoken form
    answer: bool = False  # an assistant turn that answers from the span
    question: bool = False  # a user turn that asks about the span's facts


@dataclass(frozen=True)
class Dialogue:
    topic: str
    facts: str  # the span's text
    turns: tuple[Turn, ...]

    @property
    def question_index(self) -> int:
        return next(i for i, t in enumerate(self.turns) if t.question)


NAMES = ("Ana", "Ben", "Carla", "David", "Elena", "Farid", "Grace", "Hugo", "Ines", "Jonas",
         "Kenji", "Lena", "Marco", "Nadia", "Omar", "Priya", "Rosa", "Sam", "Tara", "Victor")
CITIES = ("Lisbon", "Berlin", "Oslo", "Madrid", "Dublin", "Vienna", "Prague", "Toronto",
          "Chicago", "Denver", "Boston", "Seattle")
DAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
COLOURS = ("red", "blue", "green", "yellow", "white", "black", "orange", "purple")
STREETS = ("Maple Street", "Harbor Road", "Elm Avenue", "King Street", "Park Lane",
           "Mill Road", "Oak Drive", "Station Road")
OPENERS = (
    ("Hi, can you help me with something?", "Of course, what do you need?"),
    ("Hey, are you there?", "Yes, I am here. How can I help?"),
    ("Good morning.", "Good morning! What can I do for you?"),
    ("Hello, quick question.", "Sure, go ahead."),
)
CLOSERS = (
    ("Great, thanks.", "You are welcome."),
    ("Perfect, thank you.", "Happy to help."),
    ("Okay, got it.", "Anything else?"),
)


def _time(rng: random.Random, first: int = 6, last: int = 21) -> Value:
    hour = rng.randint(first, last)
    minute = rng.choice((0, 5, 10, 15, 20, 25, 30, 35, 40, 45, 50, 55))
    shown = hour if hour <= 12 else hour - 12
    suffix = "am" if hour < 12 else "pm"
    return Value(f"{shown}:{minute:02d} {suffix}",
                 f"{clock_words(shown, minute)} {'a m' if suffix == 'am' else 'p m'}")


def _number(rng: random.Random, low: int, high: int) -> Value:
    n = rng.randint(low, high)
    return Value(str(n), number_words(n))


def _gate(rng: random.Random) -> Value:
    letter = rng.choice("ABCDEF")
    n = rng.randint(1, 40)
    return Value(f"{letter}{n}", f"{letter} {number_words(n)}")


def _flight(rng: random.Random, name: str) -> tuple[str, list[tuple[str, str]]]:
    time, gate, city = _time(rng), _gate(rng), rng.choice(CITIES)
    seat = Value(f"{rng.randint(2, 39)}{rng.choice('ACDF')}", "")
    seat = Value(seat.written, f"{number_words(int(seat.written[:-1]))} {seat.written[-1]}")
    facts = (f"{name}'s flight to {city} leaves at {time.written} from gate {gate.written}. "
             f"Seat {seat.written}.")
    qa = [
        (f"When does {name}'s flight leave?", f"It leaves at {time.spoken}."),
        (f"Which gate is {name} flying from?", f"Gate {gate.spoken}."),
        (f"Where is {name} flying to?", f"To {city}, at {time.spoken}."),
        (f"What seat does {name} have?", f"Seat {seat.spoken}."),
    ]
    return facts, qa


def _restaurant(rng: random.Random, name: str) -> tuple[str, list[tuple[str, str]]]:
    time, people, table = _time(rng, 18, 21), _number(rng, 2, 9), _number(rng, 1, 40)
    street = rng.choice(STREETS)
    facts = (f"Dinner booking for {name}: {people.written} people at {time.written}, "
             f"table {table.written}, the restaurant is on {street}.")
    qa = [
        (f"What time is dinner for {name}?", f"At {time.spoken}."),
        ("How many people is the booking for?", f"For {people.spoken} people."),
        ("Where is the restaurant?", f"It is on {street}."),
        ("Which table do we have?", f"Table {table.spoken}."),
    ]
    return facts, qa


def _meeting(rng: random.Random, name: str) -> tuple[str, list[tuple[str, str]]]:
    day, time, room = rng.choice(DAYS), _time(rng, 8, 17), _number(rng, 100, 599)
    facts = f"Meeting with {name} on {day} at {time.written} in room {room.written}."
    qa = [
        (f"When is my meeting with {name}?", f"On {day} at {time.spoken}."),
        (f"Which room is the meeting with {name} in?", f"Room {room.spoken}."),
        (f"What day do I see {name}?", f"On {day}."),
    ]
    return facts, qa


def _parcel(rng: random.Random, name: str) -> tuple[str, list[tuple[str, str]]]:
    day, colour, locker = rng.choice(DAYS), rng.choice(COLOURS), _number(rng, 1, 90)
    facts = (f"{name}'s parcel arrives on {day}. It is in the {colour} locker, "
             f"number {locker.written}.")
    qa = [
        (f"When does {name}'s parcel arrive?", f"On {day}."),
        (f"Which locker is {name}'s parcel in?", f"The {colour} locker, number {locker.spoken}."),
        ("What colour is the locker?", f"It is {colour}."),
    ]
    return facts, qa


def _train(rng: random.Random, name: str) -> tuple[str, list[tuple[str, str]]]:
    time, platform, city = _time(rng), _number(rng, 1, 19), rng.choice(CITIES)
    coach = _number(rng, 1, 12)
    facts = (f"{name}'s train to {city} departs at {time.written} from platform "
             f"{platform.written}, coach {coach.written}.")
    qa = [
        (f"What time is {name}'s train?", f"It departs at {time.spoken}."),
        ("Which platform does it leave from?", f"Platform {platform.spoken}."),
        (f"Which coach is {name} in?", f"Coach {coach.spoken}."),
    ]
    return facts, qa


TOPICS: dict[str, Callable[[random.Random, str], tuple[str, list[tuple[str, str]]]]] = {
    "flight": _flight,
    "restaurant": _restaurant,
    "meeting": _meeting,
    "parcel": _parcel,
    "train": _train,
}


def make_dialogue(rng: random.Random) -> Dialogue:
    """One dialogue: maybe an opener, one or two questions on the facts, maybe a closer."""
    topic = rng.choice(sorted(TOPICS))
    facts, qa = TOPICS[topic](rng, rng.choice(NAMES))
    turns: list[Turn] = []
    if rng.random() < 0.6:
        user, assistant = rng.choice(OPENERS)
        turns += [Turn("user", user), Turn("assistant", assistant)]
    for question, answer in rng.sample(qa, rng.choice((1, 2))):
        turns += [Turn("user", question, question=True),
                  Turn("assistant", answer, answer=True)]
    if rng.random() < 0.5:
        user, assistant = rng.choice(CLOSERS)
        turns += [Turn("user", user), Turn("assistant", assistant)]
    return Dialogue(topic, facts, tuple(turns))


def make_dialogues(count: int, seed: int = 0) -> list[Dialogue]:
    rng = random.Random(seed)
    return [make_dialogue(rng) for _ in range(count)]
