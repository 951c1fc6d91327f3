"""The Redis backend of the room store (ROOM_STORE=redis://host:port/db): rooms shared by several
server processes (replicas behind nginx, pods behind an Ingress).

Keys of room CODE (the {CODE} hash tag keeps them in one slot):
  live:{CODE}:room     hash: token (sha256 of the lecturer token), status, epoch, view (JSON), view_v,
                       poll (JSON), poll_id, poll_state, poll_v
  live:{CODE}:answers  hash: session -> answer JSON (the current poll's)
  live:{CODE}:seen     sorted set: session -> last check-in time
  live:{CODE}:clients  hash: client address -> sessions of it that answered the current poll
  live:limit:KEY       sorted set: the hits of a per-client limit (hit())
  live:rooms           sorted set: code -> expiry time (to count open rooms against max_rooms)
Every write that needs the lecturer token, and every answer, is one Lua script: the check and the
write are one atomic step on the server, whichever process sends them. All keys of a room carry
the room's expiry (PEXPIRE), renewed by the lecturer's writes and keep-alives.

Connection errors and timeouts (short: 0.5 s) become StoreUnavailable; the client reconnects by
itself on the next call (after a Redis restart, the scripts are loaded again by redis-py).
"""
from __future__ import annotations

import json
import secrets

from .poll import Answer, Poll
from .rooms import (LECTURER_SEEN, PRESENCE_KEEP, PRESENCE_WINDOW, NotLecturer, RoomGone, RoomState,
                    RoomStore, StoreFull, StoreUnavailable, View, same_hash)

INDEX = "live:rooms"

_CREATE = """
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
redis.call('ZREMRANGEBYSCORE', KEYS[4], '-inf', ARGV[3])
if redis.call('ZCARD', KEYS[4]) >= tonumber(ARGV[5]) then return -1 end
redis.call('DEL', KEYS[2], KEYS[3], KEYS[6])
redis.call('HSET', KEYS[1], 'token', ARGV[1], 'status', 'open', 'epoch', ARGV[2], 'view', ARGV[6],
           'view_v', ARGV[7], 'poll', ARGV[8], 'poll_id', ARGV[9], 'poll_state', ARGV[10], 'poll_v', ARGV[11])
local ttl = tonumber(ARGV[4])
for i = 12, #ARGV, 2 do redis.call('HSET', KEYS[2], ARGV[i], ARGV[i + 1]) end
for i = 1, 3 do redis.call('PEXPIRE', KEYS[i], ttl) end
redis.call('ZADD', KEYS[4], tonumber(ARGV[3]) + ttl / 1000, KEYS[5])
return 1
"""

# KEYS: room, answers, seen, index, code, clients   ARGV: token, ttl_ms, now, op, a1, a2, a3, a4
_LECTURER = """
local t = redis.call('HMGET', KEYS[1], 'token', 'status')
if not t[1] then return -2 end
if t[1] ~= ARGV[1] then return -1 end
if t[2] ~= 'open' then return -3 end
local op = ARGV[4]
local out = 0
if op == 'view' then
  redis.call('HSET', KEYS[1], 'view', ARGV[5])
  out = redis.call('HINCRBY', KEYS[1], 'view_v', 1)
elseif op == 'poll' then
  local old = redis.call('HGET', KEYS[1], 'poll_id')
  if ARGV[6] == '' or old ~= ARGV[6] then redis.call('DEL', KEYS[2], KEYS[6]) end
  redis.call('HSET', KEYS[1], 'poll', ARGV[5], 'poll_id', ARGV[6], 'poll_state', ARGV[7])
  out = redis.call('HINCRBY', KEYS[1], 'poll_v', 1)
elseif op == 'lock' then
  redis.call('HSET', KEYS[1], 'locked', ARGV[5])
elseif op == 'end' then
  redis.call('HSET', KEYS[1], 'status', 'ended')
  out = redis.call('HINCRBY', KEYS[1], 'poll_v', 1)
end
local ttl = tonumber(ARGV[2])
for _, i in ipairs({1, 2, 3, 6}) do
  if redis.call('EXISTS', KEYS[i]) == 1 then redis.call('PEXPIRE', KEYS[i], ttl) end
end
redis.call('ZADD', KEYS[4], tonumber(ARGV[3]) + ttl / 1000, KEYS[5])
return out
"""

# KEYS: room, seen   ARGV: session ('' = none), now, prune_before, max_present, the lecturer's presence key
_STATE = """
local r = redis.call('HMGET', KEYS[1], 'status', 'epoch', 'view_v', 'poll_v', 'locked')
if not r[1] then return false end
if ARGV[1] ~= '' then
  redis.call('ZADD', KEYS[2], tonumber(ARGV[2]), ARGV[1])
  redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', '(' .. ARGV[3])
  local n = redis.call('ZCARD', KEYS[2]) - tonumber(ARGV[4])
  if n > 0 then redis.call('ZREMRANGEBYRANK', KEYS[2], 0, n - 1) end
  local ttl = redis.call('PTTL', KEYS[1])
  if ttl > 0 then redis.call('PEXPIRE', KEYS[2], ttl) end
end
return {r[1], r[2], r[3], r[4], r[5] or '0', redis.call('ZSCORE', KEYS[2], ARGV[5]) or '0'}
"""

# KEYS: room, answers, clients   ARGV: poll_id, session, answer JSON, max_answers, client, max_per_client (-1: none)
_ANSWER = """
local r = redis.call('HMGET', KEYS[1], 'status', 'poll_id', 'poll_state')
if r[1] ~= 'open' or r[2] ~= ARGV[1] or r[3] ~= 'open' then return 0 end
if redis.call('HEXISTS', KEYS[2], ARGV[2]) == 0 then
  if redis.call('HLEN', KEYS[2]) >= tonumber(ARGV[4]) then return -1 end
  local per = tonumber(ARGV[6])
  if per >= 0 and tonumber(redis.call('HGET', KEYS[3], ARGV[5]) or '0') >= per then return -2 end
  redis.call('HINCRBY', KEYS[3], ARGV[5], 1)
end
redis.call('HSET', KEYS[2], ARGV[2], ARGV[3])
local ttl = redis.call('PTTL', KEYS[1])
if ttl > 0 then
  redis.call('PEXPIRE', KEYS[2], ttl)
  redis.call('PEXPIRE', KEYS[3], ttl)
end
return 1
"""

# KEYS: limit key   ARGV: now, window (s), limit, record (1/0), member
_HIT = """
local now, window = tonumber(ARGV[1]), tonumber(ARGV[2])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - window)
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[3]) then
  local oldest = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
  return tostring(tonumber(oldest[2]) + window - now)
end
if ARGV[4] == '1' then
  redis.call('ZADD', KEYS[1], now, ARGV[5])
  redis.call('PEXPIRE', KEYS[1], math.ceil(window * 1000))
end
return '0'
"""


def _keys(code: str) -> tuple[str, str, str]:
    return f"live:{{{code}}}:room", f"live:{{{code}}}:answers", f"live:{{{code}}}:seen"


def _clients(code: str) -> str:
    return f"live:{{{code}}}:clients"


def _s(x) -> str:
    return x.decode() if isinstance(x, bytes) else str(x)


class RedisStore(RoomStore):
    def __init__(self, url: str, *, timeout: float = 0.5, max_connections: int = 64, **kw):
        super().__init__(**kw)
        import redis
        self._redis_mod = redis
        self.url = url
        pool = redis.BlockingConnectionPool.from_url(url, max_connections=max_connections, timeout=timeout,
                                                     socket_timeout=timeout, socket_connect_timeout=timeout,
                                                     health_check_interval=30)
        self.r = redis.Redis(connection_pool=pool)
        self._create = self.r.register_script(_CREATE)
        self._lect = self.r.register_script(_LECTURER)
        self._state = self.r.register_script(_STATE)
        self._answer = self.r.register_script(_ANSWER)
        self._hit = self.r.register_script(_HIT)

    def _call(self, fn, *a, **kw):
        try:
            return fn(*a, **kw)
        except (self._redis_mod.ConnectionError, self._redis_mod.TimeoutError) as exc:
            raise StoreUnavailable(f"the room store ({self._where()}) does not answer: {exc}") from exc
        except self._redis_mod.RedisError as exc:  # e.g. LOADING after a restart, READONLY replica
            raise StoreUnavailable(f"the room store ({self._where()}) answered with an error: {exc}") from exc

    def _where(self) -> str:
        kw = self.r.connection_pool.connection_kwargs
        return f"redis at {kw.get('host', kw.get('path', '?'))}:{kw.get('port', '')}"

    def _ms(self, seconds: float) -> int:
        return max(1, int(seconds * 1000))

    # -- lecturer ----------------------------------------------------------------------------
    def create(self, code, token_hash, *, epoch=None, view=None, poll=None, answers=None):
        epoch = epoch or secrets.token_hex(4)
        extra: list[str] = []
        if poll is not None and answers:
            for s, a in list(answers.items())[: self.max_answers]:
                if a.poll_id == poll.id:
                    extra += [s, json.dumps(a.to_dict())]
        args = [token_hash, epoch, repr(self.clock()), self._ms(self.ttl), self.max_rooms,
                view.to_json() if view is not None else "", 1 if view is not None else 0,
                json.dumps(poll.to_dict()) if poll else "", poll.id if poll else "", poll.state if poll else "",
                1 if poll else 0, *extra]
        out = self._call(self._create, keys=[*_keys(code), INDEX, code, _clients(code)], args=args)
        if out == 0:
            return None
        if out == -1:
            raise StoreFull(f"{self.max_rooms} rooms are open")
        return RoomState(code, "open", epoch, 1 if view is not None else 0, 1 if poll else 0)

    def _lecturer(self, code, token_hash, op, *a, ttl=None) -> int:
        args = [token_hash, self._ms(self.ttl if ttl is None else ttl), repr(self.clock()), op, *a]
        out = int(self._call(self._lect, keys=[*_keys(code), INDEX, code, _clients(code)], args=args))
        if out == -2:
            raise RoomGone(code)
        if out in (-1, -3):
            raise NotLecturer(code)
        return out

    def publish(self, code, token_hash, view):
        return self._lecturer(code, token_hash, "view", view.to_json())

    def set_poll(self, code, token_hash, poll):
        if poll is None:
            return self._lecturer(code, token_hash, "poll", "", "", "")
        return self._lecturer(code, token_hash, "poll", json.dumps(poll.to_dict()), poll.id, poll.state)

    def end(self, code, token_hash):
        self._lecturer(code, token_hash, "end", ttl=self.ended_ttl)

    def keepalive(self, code, token_hash):
        self._lecturer(code, token_hash, "keep")

    def set_locked(self, code, token_hash, locked):
        self._lecturer(code, token_hash, "lock", "1" if locked else "0")

    def seen_by(self, code, window=PRESENCE_WINDOW):
        got = self._call(self.r.zrangebyscore, _keys(code)[2], repr(self.clock() - window), "+inf", withscores=True)
        return {_s(s): float(t) for s, t in got}

    def is_lecturer(self, code, token_hash):
        t = self._call(self.r.hmget, _keys(code)[0], ["token", "status"])
        return t[0] is not None and _s(t[1]) == "open" and same_hash(_s(t[0]), token_hash)

    # -- everyone ----------------------------------------------------------------------------
    def state(self, code, *, seen=None):
        now = self.clock()
        k = _keys(code)
        r = self._call(self._state, keys=[k[0], k[2]], args=[seen or "", repr(now), repr(now - PRESENCE_KEEP),
                                                            self.max_present, LECTURER_SEEN])
        if not r:
            return None
        return RoomState(code, _s(r[0]), _s(r[1]), int(r[2]), int(r[3]), _s(r[4]) == "1", float(_s(r[5])))

    def view(self, code):
        r = self._call(self.r.hmget, _keys(code)[0], ["status", "epoch", "view_v", "poll_v", "view"])
        if r[0] is None:
            return None
        return (RoomState(code, _s(r[0]), _s(r[1]), int(r[2]), int(r[3])),
                View.from_json(_s(r[4]) if r[4] else None))

    def poll(self, code):
        raw = self._call(self.r.hget, _keys(code)[0], "poll")
        return Poll.from_dict(json.loads(_s(raw))) if raw else None

    def answer_status(self, code, poll_id, session, answer, *, client="", max_per_client=None):
        if answer.poll_id != poll_id:
            return "closed"
        k = _keys(code)
        out = self._call(self._answer, keys=[k[0], k[1], _clients(code)],
                         args=[poll_id, session, json.dumps(answer.to_dict()), self.max_answers, client,
                               -1 if max_per_client is None else int(max_per_client)])
        return {1: "ok", 0: "closed", -1: "full", -2: "client"}[int(out)]

    def hit(self, key, limit, window, *, record=True):
        out = self._call(self._hit, keys=[f"live:limit:{key}"],
                         args=[repr(self.clock()), repr(float(window)), int(limit), "1" if record else "0",
                               secrets.token_hex(6)])
        return max(0.0, float(_s(out)))

    def answers(self, code, poll_id):
        raw = self._call(self.r.hgetall, _keys(code)[1])
        out = {}
        for s, v in raw.items():
            a = Answer.from_dict(json.loads(_s(v)))
            if a.poll_id == poll_id:
                out[_s(s)] = a
        return out

    def present(self, code, window=PRESENCE_WINDOW):
        return int(self._call(self.r.zcount, _keys(code)[2], repr(self.clock() - window), "+inf"))

    def rooms(self):
        self._call(self.r.zremrangebyscore, INDEX, "-inf", repr(self.clock()))
        return int(self._call(self.r.zcard, INDEX))

    def close(self):
        try:
            self.r.close()
            self.r.connection_pool.disconnect()
        except Exception:  # noqa: BLE001  closing a pool whose server is gone
            pass

