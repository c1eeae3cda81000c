"""The journal: records kept beside the memories in one database (`journal.py` opens it for all).

`change_log.py` (old versions of memories), `job_queue.py` (background jobs and dead letters), `token_usage.py`,
`checkin_log.py`, `reply_traces.py` (what each reply's prompt held, by id), `user_settings.py` (time zone,
sharing, check-ins), `place_personas.py` (who speaks where), `profiles.py` (each user's portrait, written by the
background from their facts), `ongoing_threads.py` (what is going on in their life now, kept by the monitor).
"""
