#!lua flags=no-writes
-- Every numeric field of `INFO pathlock`, for oliver006's redis_exporter:
--   redis_exporter --script /usr/share/redis-pathlock/prometheus/pathlock.lua
-- The exporter runs the script with EVAL (or EVAL_RO with --lua-script-read-only) at each scrape
-- and exports each returned pair as the gauge redis_script_values{key="<field>"}.
--
-- Fields are found by pattern, not listed, so a field a newer module adds is exported without a
-- change here. A field whose value is a list (`name:a=1,b=2`, which INFO gives for dictionaries)
-- becomes one pair per number (`name_a`, `name_b`). Anything that is not a number is left out,
-- because the exporter drops the whole script's output when one value does not parse as one.
-- The `no-writes` flag lets it run on replicas and on a server that is out of memory.
local info = redis.call("INFO", "pathlock")
local result = {}
for name, value in string.gmatch(info, "(pathlock_[%w_]+):([^\r\n]*)") do
    if tonumber(value) then
        result[#result + 1] = name
        result[#result + 1] = value
    else
        for part, number in string.gmatch(value, "([%w_]+)=([^,]*)") do
            if tonumber(number) then
                result[#result + 1] = name .. "_" .. part
                result[#result + 1] = number
            end
        end
    end
end
return result
