-- Shared helpers: refusals, id parsing, timestamps, tokens, trust.
--
-- Every refusal of every function goes through switchboard.refuse(): it raises the SQLSTATE of
-- a wire code (table switchboard.error_codes) with a fixed, secret-free message, so psql and an
-- agent see the same verdict.

-- Raise a domain refusal with the SQLSTATE of its wire code (see switchboard.error_codes).
CREATE OR REPLACE FUNCTION switchboard.refuse(p_code text, p_message text) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    v_state text;
BEGIN
    SELECT sqlstate INTO v_state FROM switchboard.error_codes WHERE code = p_code;
    RAISE EXCEPTION USING ERRCODE = coalesce(v_state, 'XX000'), MESSAGE = p_message;
END
$$;
COMMENT ON FUNCTION switchboard.refuse(text, text) IS
  'Raises the SQLSTATE of a wire error code (switchboard.error_codes) with a fixed, secret-free message.';

-- STABLE, as to_char is: an IMMUTABLE wrapper around a STABLE call would never be inlined.
-- Ids arrive as text from agents; a malformed one must behave like an unknown one, not raise.
CREATE OR REPLACE FUNCTION switchboard.as_uuid(p_text text) RETURNS uuid
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE WHEN p_text ~* '^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$' THEN p_text::uuid END
$$;
COMMENT ON FUNCTION switchboard.as_uuid(text) IS 'The uuid in p_text, or NULL when it is not one (malformed ids match nothing).';

-- The ISO text to_jsonb() writes for a timestamp, whatever DateStyle says, is the RFC 3339 form
-- and costs about 0.2 us (to_char(): 1.4 us; every answer formats one to four). Trailing zeros
-- of the fraction are left out ("...:02.84007Z", "...:02Z"), which RFC 3339 allows.
CREATE OR REPLACE FUNCTION switchboard.rfc3339(p_ts timestamptz) RETURNS text
LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT (to_jsonb(p_ts AT TIME ZONE 'UTC') #>> '{}') || 'Z'
$$;
COMMENT ON FUNCTION switchboard.rfc3339(timestamptz) IS
  'RFC 3339 UTC text of a timestamp ("2026-11-30T21:39:02.84007Z"), whatever the session TimeZone and DateStyle.';

-- A one-time secret from the server's strong random source (gen_random_uuid uses pg_strong_random).
CREATE OR REPLACE FUNCTION switchboard.new_token(p_prefix text) RETURNS text
LANGUAGE sql VOLATILE AS $$
    SELECT p_prefix || replace(gen_random_uuid()::text || gen_random_uuid()::text, '-', '')
$$;
COMMENT ON FUNCTION switchboard.new_token(text) IS 'Prefix plus 244 random bits in hex; used for lease fence tokens.';

-- Trust is switchboard's decision, from the source type alone; no input can change it.
CREATE OR REPLACE FUNCTION switchboard.trust_mode(p_source_type text) RETURNS text
LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE WHEN p_source_type IN ('github', 'gitea', 'stripe', 'slack', 'cairn', 'standard') THEN 'signed'
                WHEN p_source_type = 'generic' THEN 'token' END
$$;
COMMENT ON FUNCTION switchboard.trust_mode(text) IS
  'signed for github gitea stripe slack cairn standard (HMAC-verified), token for generic; NULL for unknown types.';

-- Who issues a source type's signing secret. Stripe and Slack always issue their own; Standard
-- Webhooks producers do either (Svix's API takes a given secret, Clerk and Resend show their own);
-- the forges and cairn take the one Switchboard mints. NULL for token types (no secret).
CREATE OR REPLACE FUNCTION switchboard.secret_issuer(p_source_type text) RETURNS text
LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE WHEN p_source_type IN ('stripe', 'slack') THEN 'provider'
                WHEN p_source_type = 'standard' THEN 'either'
                WHEN switchboard.trust_mode(p_source_type) = 'signed' THEN 'switchboard' END
$$;
COMMENT ON FUNCTION switchboard.secret_issuer(text) IS
  'provider (stripe, slack), either (standard), switchboard (github, gitea, cairn); NULL for token types.';

-- The server mints 32 random bytes as whsec_<hex>: the HMAC key, as a string, of every signed
-- type but one. Standard Webhooks secrets are whsec_<base64 of the key bytes> (its senders and
-- libraries decode them), so for standard the same bytes are written in base64. A secret in any
-- other form is kept as given.
CREATE OR REPLACE FUNCTION switchboard.signing_secret(p_source_type text, p_minted text) RETURNS text
LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE WHEN switchboard.trust_mode(p_source_type) IS DISTINCT FROM 'signed' THEN NULL
                WHEN p_source_type = 'standard' AND p_minted ~ '^whsec_[0-9a-f]{64}$'
                THEN 'whsec_' || encode(decode(substr(p_minted, 7), 'hex'), 'base64')
                ELSE p_minted END
$$;
COMMENT ON FUNCTION switchboard.signing_secret(text, text) IS
  'The secret a webhook of this source type keeps: NULL for token types; for standard, a minted whsec_<64 hex> becomes whsec_<base64> of the same 32 bytes.';
