-- Placeholder so this branch's 007 has a predecessor (tern refuses a gap). Migration 006 belongs
-- to another branch: delete this file when that branch is merged.
SELECT 1;
