"""A live class: rooms that students follow, class polls, and the room store with its three backends
(SQLite on disk by default, Redis for several machines, in-process memory as a test double). Pure
Python: the Streamlit side is ui/live.py.

    store = open_store(os.environ.get("ROOM_STORE"))      # SQLiteStore, RedisStore or MemoryStore
    code, token = new_code(), new_token()
    store.create(code, token_hash(token))
    store.publish(code, token_hash(token), View.of("lesson", {"text": "the cat sat"}))
    store.state(code, seen="session-1")  -> RoomState(status, epoch, view_version, poll_version)
"""
from .poll import (Answer, Poll, PollQuestion, Tally, attention_question, clean_nickname, from_lesson, option_words,
                   poll_csv, tally)
from .rooms import (CODE_ALPHABET, CODE_LENGTH, PRESENCE_WINDOW, MemoryStore, NotLecturer, RoomGone, RoomState,
                    RoomStore, StoreFull, StoreMisconfigured, StoreUnavailable, View, new_code, new_token, normalize_code, open_store,
                    token_hash)

__all__ = ["Answer", "Poll", "PollQuestion", "Tally", "attention_question", "clean_nickname", "from_lesson", "option_words",
           "poll_csv", "tally", "CODE_ALPHABET", "CODE_LENGTH", "PRESENCE_WINDOW", "MemoryStore", "NotLecturer",
           "RoomGone", "RoomState", "RoomStore", "StoreFull", "StoreMisconfigured", "StoreUnavailable", "View", "new_code", "new_token",
           "normalize_code", "open_store", "token_hash"]
