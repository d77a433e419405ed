"""The tests' Redis cache: clear() empties only this run's keys (its prefix), never the whole
Redis database another copy of the suite, or a service, shares."""

from __future__ import annotations

from django.core.cache.backends.redis import RedisCache


class RunsOwnRedisCache(RedisCache):
    def clear(self) -> bool:
        client = self._cache.get_client(write=True)
        doomed = list(client.scan_iter(match=f"{self.key_prefix}:*", count=1000))
        for start in range(0, len(doomed), 1000):
            client.delete(*doomed[start : start + 1000])
        return True
