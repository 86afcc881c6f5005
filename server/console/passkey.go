package console

import (
	"encoding/hex"
	"encoding/json"
	"errors"
	"net/http"

	"github.com/go-webauthn/webauthn/protocol"
	"github.com/go-webauthn/webauthn/webauthn"
	"github.com/google/uuid"

	"switchboard/server/store"
)

// Passkeys (github.com/go-webauthn/webauthn). An invite link opens a page that registers a
// passkey for its human (discoverable, so that later sign-ins need no name), uses the invite up
// and signs the human in; the sign-in page asks the browser for any passkey of this site and
// finds the human by its user handle (the human's id). A ceremony's challenge waits in
// switchboard.console_ceremonies under a short-lived cookie. The two pages run
// assets/passkey.js (the browser's WebAuthn API has no form equivalent); every other page has no
// script.

// waUser is a human as go-webauthn sees them.
type waUser struct {
	id    uuid.UUID
	name  string
	creds []webauthn.Credential
}

func (u *waUser) WebAuthnID() []byte                         { return u.id[:] }
func (u *waUser) WebAuthnName() string                       { return u.name }
func (u *waUser) WebAuthnDisplayName() string                { return u.name }
func (u *waUser) WebAuthnCredentials() []webauthn.Credential { return u.creds }

func (c *Console) loadUser(r *http.Request, human string) (*waUser, error) {
	doc, err := c.st.ConsoleWebAuthnUser(r.Context(), human)
	if err != nil || doc == nil {
		return nil, errors.Join(err, errors.New("unknown human"))
	}
	var v struct {
		ID    uuid.UUID             `json:"human_id"`
		Name  string                `json:"name"`
		Creds []webauthn.Credential `json:"credentials"`
	}
	if err := json.Unmarshal(doc, &v); err != nil {
		return nil, err
	}
	return &waUser{id: v.ID, name: v.Name, creds: v.Creds}, nil
}

type invite struct {
	HumanID  string `json:"human_id"`
	Name     string `json:"name"`
	Passkeys int    `json:"passkeys"`
	Token    string `json:"-"`
}

// openInvite finds the live invite of the request's token (ok false: unknown, used, expired).
func (c *Console) openInvite(r *http.Request) (inv invite, ok bool, err error) {
	tok := r.PathValue("token")
	if tok == "" || len(tok) > 100 {
		return inv, false, nil
	}
	doc, err := c.st.ConsoleInviteOpen(r.Context(), hashToken(tok))
	if err != nil || doc == nil {
		return inv, false, err
	}
	inv.Token = tok
	return inv, json.Unmarshal(doc, &inv) == nil, nil
}

func (c *Console) invitePage(w http.ResponseWriter, r *http.Request) {
	inv, ok, err := c.openInvite(r)
	if err != nil {
		c.failed(w, r, err)
		return
	}
	if !ok {
		c.render(w, r, "invite", http.StatusNotFound, view{Error: "This sign-in link is used, expired or unknown. Ask the operator for a new one (switchboard human invite)."})
		return
	}
	c.render(w, r, "invite", http.StatusOK, view{Data: inv})
}

// jsonError answers a ceremony step that failed; the page shows msg.
func jsonError(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]string{"error": msg})
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

// beginCeremony keeps the session data under a fresh ceremony cookie.
func (c *Console) beginCeremony(w http.ResponseWriter, r *http.Request, kind string, invite []byte, sd *webauthn.SessionData) error {
	data, err := json.Marshal(sd)
	if err != nil {
		return err
	}
	id := newToken()
	if err := c.st.ConsoleCeremonyPut(r.Context(), hashToken(id), kind, invite, data, ceremonyTTL); err != nil {
		return err
	}
	setCookie(w, ceremonyCookie, id, int(ceremonyTTL.Seconds()))
	return nil
}

// takeCeremony takes the request's ceremony of that kind, once.
func (c *Console) takeCeremony(w http.ResponseWriter, r *http.Request, kind string) (sd webauthn.SessionData, invite []byte, ok bool, err error) {
	ck, cerr := r.Cookie(ceremonyCookie)
	setCookie(w, ceremonyCookie, "", -1)
	if cerr != nil || ck.Value == "" || len(ck.Value) > 100 {
		return sd, nil, false, nil
	}
	doc, err := c.st.ConsoleCeremonyTake(r.Context(), hashToken(ck.Value), kind)
	if err != nil || doc == nil {
		return sd, nil, false, err
	}
	var v struct {
		Data   json.RawMessage `json:"data"`
		Invite string          `json:"invite"`
	}
	if err := json.Unmarshal(doc, &v); err != nil {
		return sd, nil, false, err
	}
	invite, _ = hex.DecodeString(v.Invite)
	return sd, invite, json.Unmarshal(v.Data, &sd) == nil, nil
}

func (c *Console) inviteBegin(w http.ResponseWriter, r *http.Request) {
	if c.limits.blocked(r) {
		jsonError(w, http.StatusTooManyRequests, "Too many failed attempts: wait a minute and try again.")
		return
	}
	inv, ok, err := c.openInvite(r)
	if err != nil {
		c.log.Error("console: invite lookup failed", "err", store.Classify(err).Unwrap())
		jsonError(w, http.StatusInternalServerError, "internal error")
		return
	}
	if !ok {
		c.limits.failed(r)
		jsonError(w, http.StatusNotFound, "This sign-in link is used, expired or unknown.")
		return
	}
	user, err := c.loadUser(r, inv.HumanID)
	if err != nil {
		jsonError(w, http.StatusInternalServerError, "internal error")
		return
	}
	var exclude []protocol.CredentialDescriptor
	for _, cr := range user.creds {
		exclude = append(exclude, cr.Descriptor())
	}
	opts, sd, err := c.wa.BeginRegistration(user,
		webauthn.WithResidentKeyRequirement(protocol.ResidentKeyRequirementRequired),
		webauthn.WithExclusions(exclude))
	if err == nil {
		err = c.beginCeremony(w, r, "register", hashToken(inv.Token), sd)
	}
	if err != nil {
		c.log.Error("console: registration begin failed", "err", err)
		jsonError(w, http.StatusInternalServerError, "internal error")
		return
	}
	writeJSON(w, opts)
}

func (c *Console) inviteFinish(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, 64<<10)
	if c.limits.blocked(r) {
		jsonError(w, http.StatusTooManyRequests, "Too many failed attempts: wait a minute and try again.")
		return
	}
	fail := func(msg string) {
		c.limits.failed(r)
		c.log.Info("console: passkey registration refused", "reason", msg)
		jsonError(w, http.StatusBadRequest, "The passkey could not be registered: "+msg+". Open the link again to retry.")
	}
	sd, inviteHash, ok, err := c.takeCeremony(w, r, "register")
	if err != nil {
		jsonError(w, http.StatusInternalServerError, "internal error")
		return
	}
	if !ok || len(inviteHash) == 0 || string(inviteHash) != string(hashToken(r.PathValue("token"))) {
		fail("the registration expired")
		return
	}
	user, err := c.loadUser(r, uuid.UUID(sd.UserID).String())
	if len(sd.UserID) != 16 || err != nil {
		fail("unknown human")
		return
	}
	parsed, err := protocol.ParseCredentialCreationResponseBody(r.Body)
	if err != nil {
		fail("the browser's answer did not parse")
		return
	}
	cred, err := c.wa.CreateCredential(user, sd, parsed)
	if err != nil {
		fail("the browser's answer did not verify")
		return
	}
	doc, _ := json.Marshal(cred)
	res, err := c.st.ConsolePasskeyRegister(r.Context(), inviteHash, cred.ID, doc)
	if err != nil {
		c.log.Error("console: passkey store failed", "err", store.Classify(err).Unwrap())
		jsonError(w, http.StatusInternalServerError, "internal error")
		return
	}
	if res == nil {
		fail("the link was used meanwhile")
		return
	}
	if err := c.startSession(w, r, user.id.String()); err != nil {
		jsonError(w, http.StatusInternalServerError, "internal error")
		return
	}
	c.log.Info("console: passkey registered", "human", user.id.String())
	writeJSON(w, map[string]string{"next": "/console/"})
}

func (c *Console) signinPage(w http.ResponseWriter, r *http.Request) {
	c.render(w, r, "signin", http.StatusOK, view{})
}

func (c *Console) signinBegin(w http.ResponseWriter, r *http.Request) {
	if c.limits.blocked(r) {
		jsonError(w, http.StatusTooManyRequests, "Too many failed sign-ins: wait a minute and try again.")
		return
	}
	opts, sd, err := c.wa.BeginDiscoverableLogin(webauthn.WithUserVerification(protocol.VerificationPreferred))
	if err == nil {
		err = c.beginCeremony(w, r, "signin", nil, sd)
	}
	if err != nil {
		c.log.Error("console: sign-in begin failed", "err", err)
		jsonError(w, http.StatusInternalServerError, "internal error")
		return
	}
	writeJSON(w, opts)
}

func (c *Console) signinFinish(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, 64<<10)
	if c.limits.blocked(r) {
		jsonError(w, http.StatusTooManyRequests, "Too many failed sign-ins: wait a minute and try again.")
		return
	}
	fail := func(msg string) {
		c.limits.failed(r)
		c.log.Info("console: sign-in refused", "reason", msg)
		jsonError(w, http.StatusUnauthorized, "Sign-in failed: "+msg+".")
	}
	sd, _, ok, err := c.takeCeremony(w, r, "signin")
	if err != nil {
		jsonError(w, http.StatusInternalServerError, "internal error")
		return
	}
	if !ok {
		fail("the sign-in expired; try again")
		return
	}
	parsed, err := protocol.ParseCredentialRequestResponseBody(r.Body)
	if err != nil {
		fail("the browser's answer did not parse")
		return
	}
	var who *waUser
	handler := func(_, userHandle []byte) (webauthn.User, error) {
		id, err := uuid.FromBytes(userHandle)
		if err != nil {
			return nil, err
		}
		u, err := c.loadUser(r, id.String())
		who = u
		return u, err
	}
	cred, err := c.wa.ValidateDiscoverableLogin(handler, sd, parsed)
	if err != nil || who == nil {
		fail("this passkey is not one of this site's")
		return
	}
	doc, _ := json.Marshal(cred)
	if err := c.st.ConsolePasskeyUsed(r.Context(), cred.ID, doc); err != nil {
		c.log.Warn("console: passkey use not recorded", "err", store.Classify(err).Unwrap())
	}
	if err := c.startSession(w, r, who.id.String()); err != nil {
		jsonError(w, http.StatusInternalServerError, "internal error")
		return
	}
	writeJSON(w, map[string]string{"next": "/console/"})
}
