-- The installed code package (db/code): its fingerprint, so a migrate whose package is already
-- installed installs nothing, and a hash of each trigger's statement, so an install re-creates
-- only the triggers that changed (creating one locks its table against writes). Written by
-- `switchboard migrate` (db/install.go); an install by the tern CLI clears it, so the next
-- migrate installs again.
CREATE TABLE switchboard.code_package (
    one          boolean PRIMARY KEY DEFAULT true CHECK (one),
    fingerprint  text,
    triggers     jsonb NOT NULL DEFAULT '{}',
    installed_at timestamptz NOT NULL DEFAULT now()
);
