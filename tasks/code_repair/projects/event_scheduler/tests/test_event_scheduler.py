import datetime as dt

import pytest

from event_scheduler import ConflictError, Event, Scheduler, WorkingHours

MON = dt.date(2024, 3, 4)
TUE = dt.date(2024, 3, 5)
FRI = dt.date(2024, 3, 8)
SAT = dt.date(2024, 3, 9)


def at(day: dt.date, hour: int, minute: int = 0) -> dt.datetime:
    return dt.datetime.combine(day, dt.time(hour, minute))


def ev(name, day, hour, minutes, priority=0, minute=0):
    return Event(name, at(day, hour, minute), dt.timedelta(minutes=minutes), priority)


# --- model -----------------------------------------------------------------

def test_event_end_and_contains():
    e = ev("standup", MON, 9, 15)
    assert e.end == at(MON, 9, 15)
    assert e.contains(at(MON, 9))
    assert e.contains(at(MON, 9, 14))
    assert not e.contains(at(MON, 9, 15))
    assert not e.contains(at(MON, 8, 59))


@pytest.mark.parametrize(
    "other_start, other_minutes, expected",
    [
        ((10, 0), 60, True),
        ((9, 30), 60, True),
        ((10, 30), 60, True),
        ((11, 0), 30, False),
        ((9, 0), 60, False),
        ((9, 0), 61, True),
        ((10, 59), 1, True),
        ((9, 30), 180, True),
    ],
)
def test_event_overlaps(other_start, other_minutes, expected):
    base = ev("base", MON, 10, 60)
    other = ev("other", MON, other_start[0], other_minutes, minute=other_start[1])
    assert base.overlaps(other) is expected
    assert other.overlaps(base) is expected


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(name="", duration=dt.timedelta(minutes=5)),
        dict(name="   ", duration=dt.timedelta(minutes=5)),
        dict(name="x", duration=dt.timedelta(0)),
        dict(name="x", duration=dt.timedelta(minutes=-5)),
        dict(name="x", duration=dt.timedelta(minutes=5), priority=-1),
        dict(name="x", duration=dt.timedelta(minutes=5), priority=10),
    ],
)
def test_event_validation(kwargs):
    with pytest.raises(ValueError):
        Event(start=at(MON, 9), **kwargs)


def test_event_default_priority_and_immutability():
    e = Event("x", at(MON, 9), dt.timedelta(minutes=1))
    assert e.priority == 0
    with pytest.raises(AttributeError):
        e.priority = 5
    hours = WorkingHours()
    with pytest.raises(AttributeError):
        hours.start = dt.time(8)


def test_event_priority_bounds_inclusive():
    assert Event("low", at(MON, 9), dt.timedelta(seconds=1), 0).priority == 0
    assert Event("high", at(MON, 9), dt.timedelta(seconds=1), 9).priority == 9


def test_working_hours_defaults_and_window():
    hours = WorkingHours()
    assert hours.window(MON) == (at(MON, 9), at(MON, 17))
    assert hours.window(FRI) == (at(FRI, 9), at(FRI, 17))
    assert hours.window(SAT) is None
    assert hours.is_working_day(FRI)
    assert not hours.is_working_day(SAT)
    assert not hours.is_working_day(dt.date(2024, 3, 10))


def test_working_hours_validation():
    with pytest.raises(ValueError):
        WorkingHours(dt.time(17), dt.time(9))
    with pytest.raises(ValueError):
        WorkingHours(dt.time(9), dt.time(9))
    with pytest.raises(ValueError):
        WorkingHours(weekdays=frozenset({7}))
    with pytest.raises(ValueError):
        WorkingHours(weekdays=frozenset({-1}))
    assert WorkingHours(weekdays=frozenset({0, 6})).is_working_day(dt.date(2024, 3, 10))


# --- adding, conflicts, priorities --------------------------------------------

def test_add_and_get_and_len():
    s = Scheduler()
    assert s.add(ev("a", MON, 9, 30)) == []
    assert s.add(ev("b", MON, 9, 30, minute=30)) == []
    assert len(s) == 2
    assert s.get("a").start == at(MON, 9)
    with pytest.raises(KeyError):
        s.get("zzz")


def test_add_duplicate_name():
    s = Scheduler()
    s.add(ev("a", MON, 9, 30))
    with pytest.raises(ValueError):
        s.add(ev("a", TUE, 9, 30))


def test_conflict_with_equal_priority_raises_and_changes_nothing():
    s = Scheduler()
    s.add(ev("a", MON, 10, 60, priority=3))
    with pytest.raises(ConflictError) as info:
        s.add(ev("b", MON, 10, 30, minute=30, priority=3))
    assert [c.name for c in info.value.conflicts] == ["a"]
    assert info.value.event.name == "b"
    assert "'b' conflicts with a" in str(info.value)
    assert len(s) == 1


def test_higher_priority_displaces_lower():
    s = Scheduler()
    s.add(ev("late", MON, 11, 60, priority=1))
    s.add(ev("early", MON, 10, 60, priority=2))
    s.add(ev("free", MON, 13, 60, priority=0))
    displaced = s.add(ev("boss", MON, 10, 90, minute=30, priority=5))
    assert [e.name for e in displaced] == ["early", "late"]
    assert sorted(e.name for e in s.events_on(MON)) == ["boss", "free"]


def test_mixed_priorities_block_everything():
    s = Scheduler()
    s.add(ev("low", MON, 10, 30, priority=1))
    s.add(ev("high", MON, 10, 30, minute=30, priority=6))
    with pytest.raises(ConflictError) as info:
        s.add(ev("mid", MON, 10, 60, priority=5))
    assert [c.name for c in info.value.conflicts] == ["high"]
    assert len(s) == 2


def test_force_adds_overlapping_without_displacing():
    s = Scheduler()
    s.add(ev("a", MON, 10, 60, priority=9))
    assert s.add(ev("b", MON, 10, 60, priority=0), force=True) == []
    assert len(s) == 2


def test_conflicts_with_sorted_and_excludes_self():
    s = Scheduler()
    s.add(ev("z", MON, 10, 30))
    s.add(ev("y", MON, 10, 30), force=True)
    s.add(ev("x", MON, 9, 90), force=True)
    probe = ev("probe", MON, 10, 15)
    assert [e.name for e in s.conflicts_with(probe)] == ["x", "y", "z"]
    assert [e.name for e in s.conflicts_with(s.get("x"))] == ["y", "z"]


def test_remove():
    s = Scheduler()
    s.add(ev("a", MON, 9, 30))
    assert s.remove("a").name == "a"
    assert len(s) == 0
    with pytest.raises(KeyError):
        s.remove("a")
    s.add(ev("b", MON, 9, 30))


def test_events_on_day_ordering_and_overnight():
    s = Scheduler()
    s.add(ev("b", MON, 9, 30, priority=1))
    s.add(ev("a", MON, 9, 30, priority=1), force=True)
    s.add(ev("vip", MON, 9, 30, priority=7), force=True)
    s.add(ev("night", MON, 23, 120))
    s.add(ev("tue", TUE, 2, 30))
    assert [e.name for e in s.events_on(MON)] == ["vip", "a", "b", "night"]
    assert [e.name for e in s.events_on(TUE)] == ["night", "tue"]
    assert s.events_on(dt.date(2024, 3, 3)) == []


def test_events_on_excludes_event_ending_at_midnight():
    s = Scheduler()
    s.add(Event("late", at(MON, 23), dt.timedelta(hours=1)))
    assert [e.name for e in s.events_on(MON)] == ["late"]
    assert s.events_on(TUE) == []
    s.add(Event("midnight", at(TUE, 0), dt.timedelta(minutes=30)))
    assert [e.name for e in s.events_on(MON)] == ["late"]
    assert [e.name for e in s.events_on(TUE)] == ["midnight"]


def test_all_conflicts():
    s = Scheduler()
    s.add(ev("a", MON, 9, 60))
    s.add(ev("b", MON, 9, 30, minute=30), force=True)
    s.add(ev("c", MON, 10, 30), force=True)  # touches a, overlaps nothing
    s.add(ev("d", MON, 10, 60, minute=15), force=True)  # overlaps c
    assert s.all_conflicts() == [("a", "b"), ("c", "d")]
    assert Scheduler().all_conflicts() == []


def test_all_conflicts_long_event_spans_many():
    s = Scheduler()
    s.add(ev("long", MON, 9, 240))
    s.add(ev("x", MON, 10, 30), force=True)
    s.add(ev("y", MON, 12, 30), force=True)
    s.add(ev("z", MON, 13, 30), force=True)
    assert s.all_conflicts() == [("long", "x"), ("long", "y")]


# --- free slots -------------------------------------------------------------

def test_free_slots_empty_day_and_weekend():
    s = Scheduler()
    assert s.free_slots(MON) == [(at(MON, 9), at(MON, 17))]
    assert s.free_slots(SAT) == []


def test_free_slots_with_events_and_clipping():
    s = Scheduler()
    s.add(ev("early", MON, 8, 90))        # 8:00-9:30, clipped at 9:00
    s.add(ev("mid", MON, 11, 60))         # 11:00-12:00
    s.add(ev("touch", MON, 12, 30))       # 12:00-12:30 touches mid
    s.add(ev("late", MON, 16, 120))       # 16:00-18:00, clipped at 17:00
    s.add(ev("other_day", TUE, 10, 60))
    assert s.free_slots(MON) == [
        (at(MON, 9, 30), at(MON, 11)),
        (at(MON, 12, 30), at(MON, 16)),
    ]


def test_free_slots_ignores_events_outside_window():
    s = Scheduler()
    s.add(ev("breakfast", MON, 8, 60))    # ends exactly at 9:00
    s.add(ev("dinner", MON, 17, 60))      # starts exactly at 17:00
    assert s.free_slots(MON) == [(at(MON, 9), at(MON, 17))]


def test_free_slots_nested_overlapping_forced_events():
    s = Scheduler()
    s.add(ev("outer", MON, 10, 180))
    s.add(ev("inner", MON, 11, 30), force=True)
    assert s.free_slots(MON) == [(at(MON, 9), at(MON, 10)), (at(MON, 13), at(MON, 17))]


def test_free_slots_fully_booked():
    s = Scheduler()
    s.add(ev("all", MON, 9, 480))
    assert s.free_slots(MON) == []


def test_free_slots_min_duration_inclusive():
    s = Scheduler()
    s.add(ev("a", MON, 9, 30, minute=30))     # free 9:00-9:30 (30 min)
    s.add(ev("b", MON, 10, 400, minute=15))   # free 10:00-10:15 (15 min), busy to 16:55
    slots = s.free_slots(MON, min_duration=dt.timedelta(minutes=30))
    assert slots == [(at(MON, 9), at(MON, 9, 30))]
    assert len(s.free_slots(MON, min_duration=dt.timedelta(minutes=5))) == 3
    assert len(s.free_slots(MON, min_duration=dt.timedelta(minutes=6))) == 2


def test_custom_working_hours():
    hours = WorkingHours(dt.time(8), dt.time(12), frozenset({5}))
    s = Scheduler(hours)
    assert s.free_slots(MON) == []
    assert s.free_slots(SAT) == [(at(SAT, 8), at(SAT, 12))]


# --- find_slot & utilization -----------------------------------------------

def test_find_slot_same_day():
    s = Scheduler()
    s.add(ev("a", MON, 9, 60))
    s.add(ev("b", MON, 10, 60, minute=30))
    assert s.find_slot(dt.timedelta(minutes=30), at(MON, 8)) == at(MON, 10)
    assert s.find_slot(dt.timedelta(minutes=31), at(MON, 8)) == at(MON, 11, 30)


def test_find_slot_respects_after_within_slot():
    s = Scheduler()
    assert s.find_slot(dt.timedelta(hours=1), at(MON, 13, 20)) == at(MON, 13, 20)
    assert s.find_slot(dt.timedelta(hours=1), at(MON, 16)) == at(MON, 16)
    assert s.find_slot(dt.timedelta(hours=1), at(MON, 16, 1)) == at(TUE, 9)


def test_find_slot_skips_weekend():
    s = Scheduler()
    assert s.find_slot(dt.timedelta(hours=2), at(FRI, 16)) == at(dt.date(2024, 3, 11), 9)


def test_find_slot_none_when_too_long_or_out_of_days():
    s = Scheduler()
    assert s.find_slot(dt.timedelta(hours=9), at(MON, 0)) is None
    assert s.find_slot(dt.timedelta(hours=8), at(MON, 0)) == at(MON, 9)
    assert s.find_slot(dt.timedelta(hours=1), at(SAT, 0), max_days=2) is None
    assert s.find_slot(dt.timedelta(hours=1), at(SAT, 0), max_days=3) == at(dt.date(2024, 3, 11), 9)


def test_find_slot_default_search_window_is_14_days():
    s = Scheduler(WorkingHours(weekdays=frozenset({0})))  # Mondays only
    s.add(ev("busy", dt.date(2024, 3, 11), 9, 480))
    after = at(MON, 17)  # too late on day 0; day 7 is booked; day 14 is free
    assert s.find_slot(dt.timedelta(hours=1), after) is None
    assert s.find_slot(dt.timedelta(hours=1), after, max_days=15) == at(dt.date(2024, 3, 18), 9)


def test_find_slot_invalid_duration():
    with pytest.raises(ValueError):
        Scheduler().find_slot(dt.timedelta(0), at(MON, 9))


def test_utilization():
    s = Scheduler()
    assert s.utilization(MON) == 0.0
    s.add(ev("a", MON, 9, 120))
    s.add(ev("b", MON, 8, 30))            # outside the window
    assert s.utilization(MON) == pytest.approx(0.25)
    s.add(ev("c", MON, 15, 180))          # only 2 hours inside
    assert s.utilization(MON) == pytest.approx(0.5)
    assert s.utilization(SAT) == 0.0
