import pytest

from app.auth.service import AuthError, authenticate, create_user, verify_password


def test_passwords_are_hashed_with_argon2id(session):
    user = create_user(session, "grace", "a long enough password")
    assert user.password_hash.startswith("$argon2id$")
    assert "a long enough password" not in user.password_hash
    assert verify_password(user.password_hash, "a long enough password")
    assert not verify_password(user.password_hash, "a long enough passwore")


def test_authenticate(session):
    create_user(session, "grace", "a long enough password")
    assert authenticate(session, "grace", "a long enough password").username == "grace"
    assert authenticate(session, "grace", "nope nope nope") is None
    assert authenticate(session, "nobody", "a long enough password") is None


def test_account_rules(session):
    with pytest.raises(AuthError, match="at least"):
        create_user(session, "short", "123")
    create_user(session, "grace", "a long enough password")
    with pytest.raises(AuthError, match="already exists"):
        create_user(session, "grace", "another long password")
