-- The receiver keeps the webhooks it has read (server/ingest, hookCache), which saves a lookup
-- round trip per delivery. The cache is never trusted on its own: the receiver stores through
-- ingest_if_current(), which checks, in the delivery's own transaction, the token and the rules
-- version the receiver used: a token rotated or deleted since is not_found (the receiver
-- forgets it and answers 404), rules saved since are stale (the receiver reads the webhook again
-- and re-routes). So "the old URL stops working at once" and "new rules apply to the next
-- delivery" hold without any notification.

INSERT INTO switchboard.error_codes (code, sqlstate, meaning) VALUES
    ('stale', 'SB412', 'the receiver routed a delivery with rules that changed since; it reads them again (never on the wire)');

CREATE FUNCTION switchboard.ingest_if_current(
    p_webhook       uuid,
    p_delivery_key  text,
    p_event_type    text,
    p_verified      boolean,
    p_verify_detail text,
    p_content_type  text,
    p_payload_size  int,
    p_payload       jsonb,
    p_headers       jsonb,
    p_title         text,
    p_disposition   text,
    p_routing       jsonb,
    p_queue         text,
    p_endpoints     uuid[],
    p_ingest_token  text,
    p_rules_version bigint)
RETURNS jsonb
LANGUAGE plpgsql AS $$
DECLARE
    v_version bigint;
BEGIN
    -- A deleted webhook's token is erased, so it never matches.
    SELECT rules_version INTO v_version FROM switchboard.webhooks
     WHERE id = p_webhook AND ingest_token = p_ingest_token;
    IF NOT FOUND THEN
        PERFORM switchboard.refuse('not_found', 'webhook not found');
    ELSIF v_version <> p_rules_version THEN
        PERFORM switchboard.refuse('stale', 'the webhook''s rules changed since it was read');
    END IF;
    RETURN switchboard.ingest(p_webhook, p_delivery_key, p_event_type, p_verified, p_verify_detail,
                              p_content_type, p_payload_size, p_payload, p_headers, p_title, p_disposition,
                              p_routing, p_queue, p_endpoints);
END
$$;
COMMENT ON FUNCTION switchboard.ingest_if_current(uuid, text, text, boolean, text, text, int, jsonb, jsonb, text, text, jsonb, text, uuid[], text, bigint) IS
  'ingest() for a receiver that read the webhook earlier: not_found when the token was rotated or the webhook deleted since, stale when its rules were saved since; else ingest().';
