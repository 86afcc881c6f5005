-- Todos that no strict client could decode: JSON nested deeper than 64 levels, or a number
-- outside binary64's range (1e400). Since this migration, every way in refuses such values (the
-- webhook receiver and the MCP tools in Go, create_todo for operator pushes), but a row stored
-- before could still be claimed, fail to decode in the agent, and spend its attempts unseen.
-- Each such todo still waiting (pending, parked retry, or claimed) is dead-lettered here,
-- once, without spending an attempt; the reason is in its result. The expressions are those of
-- switchboard.undeliverable (db/code/queue.sql), which is installed after the migrations.
UPDATE switchboard.todos t
   SET state = 'failed', next_retry_at = NULL, lease_expires_at = NULL, lease_token_hash = NULL,
       result = jsonb_build_object('error', 'undeliverable: ' || u.reason), updated_at = now()
  FROM (SELECT id, CASE
                 WHEN jsonb_path_exists(payload, 'strict $.**{64 to last} ? (@.type() == "array" || @.type() == "object")')
                     THEN 'JSON nested deeper than 64 levels'
                 WHEN jsonb_path_exists(payload, 'strict $.** ? (@.type() == "number" && (@ > 1.7976931348623157e308
                          || @ < -1.7976931348623157e308 || (@ != 0 && @ < 4.9e-324 && @ > -4.9e-324)))')
                     THEN 'JSON number outside the range of a 64-bit float'
               END AS reason
          FROM switchboard.todos
         WHERE payload IS NOT NULL
           AND (state IN ('pending', 'claimed') OR (state = 'failed' AND next_retry_at IS NOT NULL))) u
 WHERE t.id = u.id AND u.reason IS NOT NULL;
