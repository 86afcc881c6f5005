-- Provider-issued secrets and refused deliveries.
--
-- Stripe, Slack and most Standard Webhooks producers issue a webhook's signing secret; the human
-- gives it to Switchboard with `switchboard webhook set-secret` (webhook_set_secret, run by the
-- operator CLI as the owner: no agent and no runtime grant). A provider rotation keeps the
-- secret in force before verifying for a TTL (previous_secret). The receiver reads both through
-- webhook_for_ingest and records what it refuses with webhook_refused.

-- The one-line next step of a new webhook, by whoever issues its secret.
CREATE OR REPLACE FUNCTION switchboard.secret_next_step(w switchboard.webhooks) RETURNS text
LANGUAGE sql STABLE AS $$
    SELECT CASE
        WHEN w.source_type = 'stripe' THEN format(
            'Paste ingest_url into Stripe as a webhook endpoint (Dashboard or stripe listen --forward-to); Stripe issues '
            'its own whsec_ secret, so ask your human to run `switchboard webhook set-secret %s` and paste that secret '
            'on its stdin (never into this chat). The signing_secret in this answer is not used by Stripe.', w.id)
        WHEN w.source_type = 'slack' THEN format(
            'Slack signs with the app''s own Signing Secret: ask your human to run `switchboard webhook set-secret %s` '
            'and paste it (Basic Information > App Credentials) on its stdin, never into this chat; then paste ingest_url '
            'as the Event Subscriptions Request URL (Slack checks it with a signed challenge). The signing_secret in '
            'this answer is not used by Slack.', w.id)
        WHEN w.source_type = 'standard' THEN format(
            'Paste ingest_url into the producer. If it accepts a given secret (the Svix API does), give it signing_secret; '
            'if it shows its own whsec_ secret (Clerk, Resend), ask your human to run `switchboard webhook set-secret %s` '
            'and paste that secret on its stdin (never into this chat).', w.id)
        WHEN switchboard.secret_issuer(w.source_type) = 'switchboard'
        THEN 'Configure the sender with ingest_url and signing_secret (shown only now).'
    END
$$;
COMMENT ON FUNCTION switchboard.secret_next_step(switchboard.webhooks) IS
  'What to do after create_webhook, by who issues the secret (secret_issuer): a fixed text, never a secret.';

-- Is p_secret the shape the provider of p_source_type issues? Stripe: whsec_ and letters and
-- digits (the dashboard's 32, the Stripe CLI's 64 hex). Standard Webhooks: whsec_ and padded
-- base64 of 24 to 64 key bytes (the spec's range). Slack: 32 lowercase hex digits.
CREATE OR REPLACE FUNCTION switchboard.provider_secret_ok(p_source_type text, p_secret text) RETURNS boolean
LANGUAGE sql IMMUTABLE AS $$
    SELECT coalesce(CASE p_source_type
        WHEN 'stripe' THEN p_secret ~ '^whsec_[A-Za-z0-9]{16,250}$'
        WHEN 'slack' THEN p_secret ~ '^[0-9a-f]{32}$'
        WHEN 'standard' THEN p_secret ~ '^whsec_[A-Za-z0-9+/]+={0,2}$' AND length(p_secret) <= 6 + 88
                             AND (length(p_secret) - 6) % 4 = 0
                             AND octet_length(decode(substr(p_secret, 7), 'base64')) BETWEEN 24 AND 64
        ELSE false END, false)
$$;
COMMENT ON FUNCTION switchboard.provider_secret_ok(text, text) IS
  'Shape check of a provider-issued secret: stripe whsec_<alnum>, standard whsec_<base64 of 24-64 bytes>, slack 32 hex.';

-- Put the provider's secret in force. Without a TTL the secret in force before stops at commit;
-- with one it keeps verifying until now() + TTL (one previous secret: a second set-secret within
-- the TTL replaces it). rules_version moves on so that a receiver holding the webhook in its
-- cache (server/receiver/hookcache.go) is refused by ingest_if_current and reads it again: the
-- old secret stops at once in every server process, not after the cache's minute.
CREATE OR REPLACE FUNCTION switchboard.webhook_set_secret(p_webhook text, p_secret text, p_previous_ttl interval DEFAULT NULL)
RETURNS jsonb
LANGUAGE plpgsql AS $$
DECLARE
    w switchboard.webhooks;
    v_keep boolean := coalesce(p_previous_ttl > interval '0', false);
BEGIN
    SELECT * INTO w FROM switchboard.webhooks
     WHERE id = switchboard.as_uuid(p_webhook) AND deleted_at IS NULL
       FOR UPDATE;
    IF NOT FOUND THEN
        PERFORM switchboard.refuse('not_found', 'unknown webhook');
    END IF;
    IF switchboard.secret_issuer(w.source_type) NOT IN ('provider', 'either') OR w.trust_mode <> 'signed' THEN
        PERFORM switchboard.refuse('invalid_argument', format(
            'a %s webhook verifies with the secret Switchboard minted (rotate_webhook mints a new one); '
            'set-secret is for stripe, slack and standard', w.source_type));
    END IF;
    IF p_previous_ttl < interval '0' OR p_previous_ttl > interval '30 days' THEN
        PERFORM switchboard.refuse('invalid_argument', 'previous-ttl must be between 0 and 30 days');
    END IF;
    -- The message names the expected shape, never the input.
    IF NOT switchboard.provider_secret_ok(w.source_type, p_secret) THEN
        PERFORM switchboard.refuse('invalid_argument', CASE w.source_type
            WHEN 'stripe' THEN 'not a Stripe signing secret: expected whsec_ followed by letters and digits'
            WHEN 'slack' THEN 'not a Slack signing secret: expected 32 lowercase hex digits'
            ELSE 'not a Standard Webhooks secret: expected whsec_ followed by the base64 of 24 to 64 bytes' END);
    END IF;
    UPDATE switchboard.webhooks
       SET previous_secret       = CASE WHEN v_keep THEN signing_secret END,
           previous_secret_until = CASE WHEN v_keep THEN now() + p_previous_ttl END,
           signing_secret        = p_secret,
           secret_source         = 'provider',
           secret_set_at         = now(),
           rules_version         = rules_version + 1
     WHERE id = w.id
    RETURNING * INTO w;
    RETURN switchboard.webhook_json(w) - 'ingest_token';
END
$$;
COMMENT ON FUNCTION switchboard.webhook_set_secret(text, text, interval) IS
  'Operator: put a provider-issued secret in force (shape-checked per type); the previous secret verifies for p_previous_ttl (default: stops at commit). Returns the webhook, never a secret.';

-- Operator: every live webhook, or one human's, with its owner; never a secret or an ingest
-- token (which authenticates generic deliveries).
CREATE OR REPLACE FUNCTION switchboard.webhook_admin_list(p_human text DEFAULT NULL) RETURNS jsonb
LANGUAGE plpgsql STABLE AS $$
DECLARE
    v_human uuid;
BEGIN
    IF p_human IS NOT NULL THEN
        v_human := switchboard.human_id(p_human);
    END IF;
    RETURN coalesce((
        SELECT jsonb_agg((switchboard.webhook_json(w) - 'ingest_token')
                         || jsonb_build_object('human', h.name, 'agent', a.name,
                                               'endpoint_id', e.id, 'endpoint_slug', e.slug)
                         ORDER BY w.created_at, w.id)
          FROM switchboard.webhooks w
          JOIN switchboard.endpoints e ON e.id = w.endpoint_id
          JOIN switchboard.agents a ON a.id = e.agent_id
          JOIN switchboard.humans h ON h.id = a.owner_human_id
         WHERE w.deleted_at IS NULL AND (v_human IS NULL OR a.owner_human_id = v_human)), '[]'::jsonb);
END
$$;
COMMENT ON FUNCTION switchboard.webhook_admin_list(text) IS
  'Operator: live webhooks (all, or one human''s) with human, agent, endpoint, secret_source and refusals; never a secret or token.';

-- webhook_by_token plus the previous secret while it still verifies. PL/pgSQL for the reason
-- endpoint_resolve is (identity.sql).
CREATE OR REPLACE FUNCTION switchboard.webhook_for_ingest(p_token text)
RETURNS TABLE (webhook_id uuid, endpoint_id uuid, source_type text, trust_mode text, signing_secret text,
               target_queue text, rules jsonb, default_action jsonb, rule_params jsonb, rules_version bigint,
               max_body bigint, previous_secret text, previous_secret_until timestamptz)
LANGUAGE plpgsql STABLE AS $$
BEGIN
    RETURN QUERY
    SELECT w.id, w.endpoint_id, w.source_type, w.trust_mode, w.signing_secret, w.target_queue,
           w.rules, w.default_action, w.rule_params, w.rules_version,
           (SELECT s.value FROM switchboard.settings s WHERE s.key = 'ingest_max_body_' || w.source_type)::bigint,
           CASE WHEN w.previous_secret_until > now() THEN w.previous_secret END,
           CASE WHEN w.previous_secret_until > now() THEN w.previous_secret_until END
      FROM switchboard.webhooks w
     WHERE w.ingest_token = p_token;
END
$$;
COMMENT ON FUNCTION switchboard.webhook_for_ingest(text) IS
  'Receiver lookup by ingest token: webhook_by_token''s columns plus the previous secret and until when it verifies (NULL once expired).';

-- Count refused deliveries of one webhook (the receiver coalesces them: one call per webhook
-- per second at most) and keep the newest refusal. A deleted webhook counts nothing.
CREATE OR REPLACE FUNCTION switchboard.webhook_refused(
    p_webhook uuid, p_bad_signature bigint, p_stale_timestamp bigint, p_too_large bigint, p_unparseable bigint,
    p_last_at timestamptz, p_last_reason text, p_last_delivery_id text)
RETURNS void
LANGUAGE sql AS $$
    INSERT INTO switchboard.webhook_refusals AS r
           (webhook_id, bad_signature, stale_timestamp, too_large, unparseable, last_at, last_reason, last_delivery_id)
    SELECT w.id, p_bad_signature, p_stale_timestamp, p_too_large, p_unparseable, p_last_at, p_last_reason,
           p_last_delivery_id
      FROM switchboard.webhooks w
     WHERE w.id = p_webhook AND w.deleted_at IS NULL
    ON CONFLICT (webhook_id) DO UPDATE
       SET bad_signature    = r.bad_signature + excluded.bad_signature,
           stale_timestamp  = r.stale_timestamp + excluded.stale_timestamp,
           too_large        = r.too_large + excluded.too_large,
           unparseable      = r.unparseable + excluded.unparseable,
           -- Two servers may flush out of order: the newest refusal wins.
           last_at          = greatest(r.last_at, excluded.last_at),
           last_reason      = CASE WHEN excluded.last_at >= coalesce(r.last_at, '-infinity')
                                   THEN excluded.last_reason ELSE r.last_reason END,
           last_delivery_id = CASE WHEN excluded.last_at >= coalesce(r.last_at, '-infinity')
                                   THEN excluded.last_delivery_id ELSE r.last_delivery_id END
$$;
COMMENT ON FUNCTION switchboard.webhook_refused(uuid, bigint, bigint, bigint, bigint, timestamptz, text, text) IS
  'Receiver: add refused deliveries of a webhook by reason and keep the newest refusal (time, reason, delivery id). Never a body or signature.';
