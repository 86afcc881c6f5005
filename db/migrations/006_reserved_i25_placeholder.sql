-- Placeholder on branch i25 only: migration 006 belongs to another branch, and tern needs the
-- numbers 1..8 without a gap to run this branch's 008. Delete this file when merging (the real
-- 006 replaces it).
SELECT 1;
