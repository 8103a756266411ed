package emulatorauth

import (
	"context"
	"errors"
	"fmt"
	"slices"

	authv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	authv1client "k8s.io/client-go/kubernetes/typed/authentication/v1"
)

// TokenReviewer validates Kubernetes service account tokens with the API server's
// TokenReview (the emulator's service account needs system:auth-delegator).
type TokenReviewer struct {
	Client authv1client.TokenReviewsGetter
}

// Review implements Reviewer: the token must be authenticated for audience. Its errors
// are the API server's words, which never quote the token.
func (t TokenReviewer) Review(ctx context.Context, token, audience string) (string, error) {
	tr, err := t.Client.TokenReviews().Create(ctx, &authv1.TokenReview{
		Spec: authv1.TokenReviewSpec{Token: token, Audiences: []string{audience}},
	}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("TokenReview: %w", err)
	}
	switch {
	case !tr.Status.Authenticated:
		msg := tr.Status.Error
		if msg == "" {
			msg = "not authenticated"
		}
		return "", errors.New("TokenReview: " + msg)
	case !slices.Contains(tr.Status.Audiences, audience):
		return "", fmt.Errorf("TokenReview: the token is not for audience %q", audience)
	case tr.Status.User.Username == "":
		return "", errors.New("TokenReview: no user name")
	}
	return tr.Status.User.Username, nil
}
