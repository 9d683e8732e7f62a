-- gcra: the theoretical arrival time (TAT) of the next unit, one number per key
-- (src/domain/algorithms/gcra.rs).
-- key      string: TAT in microseconds

local function gcra(key, now, limit, window, cost, burst, pad_ms, dry)
  local need = math.max(cost, 1)
  local interval = idiv(window, limit)
  local tolerance = burst * interval
  local tat = tonumber(redis.call('GET', key))
  if tat == nil or tat < now then
    tat = now
  end

  local allowed = tat + need * interval - now <= tolerance
  local tat_after = tat
  if allowed then
    tat_after = tat + cost * interval
  end
  local reset = tat_after - now
  local commit = nil
  if allowed and cost > 0 then
    commit = function()
      redis.call('SET', key, int(tat_after), 'PX', ttl_ms(reset, pad_ms))
    end
    if not dry then
      commit()
    end
  end
  local retry = 0
  if not allowed then
    retry = tat + need * interval - tolerance - now
  end
  return {allowed and 1 or 0, idiv(math.max(0, tolerance - reset), interval), retry, reset, commit}
end
