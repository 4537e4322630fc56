import pytest

from app.auth.service import (
    AuthError,
    authenticate,
    create_user,
    end_sessions,
    set_active,
    set_password,
    verify_password,
)


def test_passwords_are_hashed_with_argon2id(session):
    user = create_user(session, "grace", "a long enough password")
    assert user.password_hash.startswith("$argon2id$")
    assert "a long enough password" not in user.password_hash
    assert verify_password(user.password_hash, "a long enough password")
    assert not verify_password(user.password_hash, "a long enough passwore")


def test_production_hashes_with_the_recommended_parameters():
    """The module's hasher (the tests swap in a cheap one: ``tests/conftest.py``) uses
    argon2-cffi's recommended parameters, RFC 9106's low-memory profile: read from the hash it
    made when the module loaded."""
    import argon2

    from app.auth import service

    made = argon2.extract_parameters(service._DUMMY_HASH)
    assert made == argon2.profiles.RFC_9106_LOW_MEMORY
    assert made.memory_cost == 64 * 1024 and made.time_cost == 3


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


def test_session_epochs_move_on_logout_new_passwords_and_deactivation(session):
    grace = create_user(session, "grace", "a long enough password")
    admin = create_user(session, "root", "a long enough password", is_admin=True)
    assert grace.session_epoch == 0
    assert end_sessions(session, grace) == 1
    set_password(session, grace, "another long password")
    assert grace.session_epoch == 2
    with pytest.raises(AuthError, match="at least"):
        set_password(session, grace, "short")
    assert grace.session_epoch == 2  # a refused password ends nothing
    set_active(session, grace, False, by=admin)
    assert grace.session_epoch == 3 and not grace.is_active
    set_active(session, grace, True, by=admin)
    assert grace.session_epoch == 3  # reactivation does not bring old sessions back
    with pytest.raises(AuthError, match="your own account"):
        set_active(session, admin, False, by=admin)
    assert admin.session_epoch == 0 and admin.is_active
