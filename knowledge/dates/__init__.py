"""Time in words, read by code: `windows.py` (a stretch of time a message names: "yesterday", "上次") and
`moments.py` (the moment a plan or state refers to: "next Monday 10:00", "明天晚上8点")."""
