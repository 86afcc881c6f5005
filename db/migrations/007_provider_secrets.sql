-- Provider-issued secrets and visible refusals.
--
-- Stripe, Slack and most Standard Webhooks producers issue the signing secret themselves; a human
-- hands it to Switchboard with `switchboard webhook set-secret` (never an agent). secret_source
-- says whose secret is in force. During a provider's rotation the secret in force before keeps
-- verifying until previous_secret_until (expire_credentials() erases it afterwards).

ALTER TABLE switchboard.webhooks
    ADD COLUMN secret_source text NOT NULL DEFAULT 'switchboard'
        CHECK (secret_source IN ('switchboard', 'provider')),
    ADD COLUMN secret_set_at timestamptz,
    ADD COLUMN previous_secret text,
    ADD COLUMN previous_secret_until timestamptz,
    ADD CONSTRAINT webhooks_previous_secret_until
        CHECK ((previous_secret IS NULL) = (previous_secret_until IS NULL));

COMMENT ON COLUMN switchboard.webhooks.secret_source IS
  'Whose signing secret is in force: switchboard (minted by create/rotate) or provider (set by a human with switchboard webhook set-secret).';
COMMENT ON COLUMN switchboard.webhooks.previous_secret IS
  'The secret in force before the last set-secret with --previous-ttl; verifies until previous_secret_until.';

-- Refused deliveries of a webhook: counters per reason and the last refusal. Never a body or a
-- signature; the delivery id only when the headers name one in a plain form (<= 128 bytes).
-- The receiver coalesces its writes (at most one per webhook per second per server process).
CREATE TABLE switchboard.webhook_refusals (
    webhook_id       uuid PRIMARY KEY REFERENCES switchboard.webhooks (id) ON DELETE CASCADE,
    bad_signature    bigint NOT NULL DEFAULT 0,
    stale_timestamp  bigint NOT NULL DEFAULT 0,
    too_large        bigint NOT NULL DEFAULT 0,
    unparseable      bigint NOT NULL DEFAULT 0,
    last_at          timestamptz,
    last_reason      text CHECK (last_reason IN ('bad_signature', 'stale_timestamp', 'too_large', 'unparseable')),
    last_delivery_id text CHECK (octet_length(last_delivery_id) <= 128)
);
COMMENT ON TABLE switchboard.webhook_refusals IS
  'Per webhook: deliveries refused (401, 413, 422) by reason, and the last one (time, reason, provider delivery id). No body, no signature.';
