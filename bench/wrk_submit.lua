-- wrk_submit.lua - wrk script: every request submits a job (POST
-- /v1/projects/{project}/jobs), each acknowledged only once durable.
--
--   CNLAB_TOKEN=<bearer token> CNLAB_PROJECT=<project id> \
--     wrk -t2 -c64 -d10s -s bench/wrk_submit.lua http://127.0.0.1:PORT
--
-- Baseline in the same run: wrk -t2 -c64 -d10s http://127.0.0.1:PORT/healthz
-- At the end it prints how many answers were not 201 (any is an error).
local token = os.getenv("CNLAB_TOKEN")
local project = os.getenv("CNLAB_PROJECT")
if not token or not project then
	error("set CNLAB_TOKEN and CNLAB_PROJECT")
end

wrk.method = "POST"
wrk.path = "/v1/projects/" .. project .. "/jobs"
wrk.headers["Authorization"] = "Bearer " .. token
wrk.headers["Content-Type"] = "application/json"
wrk.body = '{"command":"true","gpu":"h100-25"}'

local threads = {}

function setup(thread)
	table.insert(threads, thread)
end

function init(args)
	not201 = 0
end

function response(status, headers, body)
	if status ~= 201 then
		not201 = not201 + 1
	end
end

function done(summary, latency, requests)
	local bad = 0
	for _, t in ipairs(threads) do
		bad = bad + t:get("not201")
	end
	io.write(string.format("answers other than 201: %d\n", bad))
end
