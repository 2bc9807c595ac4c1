-- wrk_submit.lua - wrk submits jobs to cnlabd: POST
-- /v1/projects/{project}/jobs with a bearer token, a trivial job on an
-- h100-25 slice (no node takes it in the benches that use this: it stays
-- pending), so each request is one durable submission.  bench/issue19.sh
-- runs it as
--
--   CNLAB_TOKEN=... CNLAB_PROJECT=prj_... [CNLAB_STOP_AFTER=N] \
--     wrk -t2 -c64 -d10s -s bench/wrk_submit.lua http://127.0.0.1:PORT
--
-- wrk counts an answer other than 2xx/3xx as "Non-2xx or 3xx responses";
-- a 201 is the only success the API gives a submission.  With
-- CNLAB_STOP_AFTER each thread stops after that many answers (used to fill
-- the store with a known number of pending jobs).
local token = os.getenv("CNLAB_TOKEN")
local project = os.getenv("CNLAB_PROJECT")
if not token or not project then
	io.stderr:write("wrk_submit.lua: set CNLAB_TOKEN and CNLAB_PROJECT\n")
	os.exit(2)
end
wrk.method = "POST"
wrk.path = "/v1/projects/" .. project .. "/jobs"
wrk.headers["Authorization"] = "Bearer " .. token
wrk.headers["Content-Type"] = "application/json"
wrk.body = '{"command":"true","gpu":"h100-25"}'

local stop_after = tonumber(os.getenv("CNLAB_STOP_AFTER") or "")
if stop_after then
	local answered = 0
	response = function(status, headers, body)
		answered = answered + 1
		if answered >= stop_after then
			wrk.thread:stop()
		end
	end
end
