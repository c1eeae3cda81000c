"""The memory rules as pure functions of (record, now, policy): nothing here stores or searches.

`decay.py` (importance over time, review triggers), `temporal.py` (plans, states, changed facts), `ranking.py`
(the order of memories in a prompt), `discretion.py` (what may be said where), `checkins.py` (when to write first),
`chapters.py` (the weeks, months and years chapters cover, and when each is due), `small_talk.py` (a turn with
nothing for the monitor to learn: "ok", "haha", "好的").
"""
